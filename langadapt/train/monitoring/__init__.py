"""What a training run reports while it runs: metrics and MFU (`metrics`), TensorBoard / W&B / MLflow
(`loggers`), measured energy (`energy`) and held-out validation (`validation`)."""
