"""What a training run reports while it runs, as callbacks the loop calls (`callbacks`): the step
meter, metrics.jsonl and the console (`metrics`), TensorBoard / W&B / MLflow (`loggers`), the
profiler (`profiler`), measured energy (`energy`); `defaults.default_callbacks` is the list a
stage runs. Held-out validation (`validation`) is not a callback: it is collective work, which `fit`
calls itself (`validation.maybe_run`) and whose row it hands to the callbacks."""
