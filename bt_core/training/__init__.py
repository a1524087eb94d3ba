"""Training: the planted-behavior task, the policy model and tokenizer, the shared per-rollout
objective, sampling, the GRPO step, the native and TRL loops, resumable checkpoints — writing a
`Run` artifact — and `checkpoints.TrainedRun`, the view of a stored run that can rebuild its
models."""
