"""vLLM versions this plugin supports. vLLM's stats classes are explicitly not a stable API
("SchedulerStats and IterationStats ... may change in future versions", loggers.py), so the
plugin checks their shape at engine start and refuses to record from an unknown one."""

_instruments = ("vllm >= 0.11, < 0.34",)
#: fields read from vllm.v1.metrics.stats.FinishedRequestStats
FINISHED_FIELDS = ("e2e_latency", "queued_time", "prefill_time", "decode_time",
                   "inference_time", "mean_time_per_output_token", "num_generation_tokens")
#: attributes read from vllm.v1.metrics.stats.IterationStats
ITERATION_FIELDS = ("finished_requests", "time_to_first_tokens_iter",
                    "inter_token_latencies_iter")
