"""What a training run reports while it runs, as callbacks the loop calls (`callbacks`): the step
meter, metrics.jsonl and the console (`metrics`), TensorBoard / W&B / MLflow (`loggers`), the
profiler (`profiler`), measured energy (`energy`) and held-out validation (`validation`);
`defaults.default_callbacks` is the list a stage runs."""
