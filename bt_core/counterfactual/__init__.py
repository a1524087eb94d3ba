"""The counterfactual room: what the logged GRPO stream caused. Today it holds the exact metagradient
(`metagrad`); the replay plan (`bt_core.artifacts.replays`) and the replay engine
(`bt_core.training.replay`) move here in a later refactor."""
