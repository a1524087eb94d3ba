"""The counterfactual room: what the logged GRPO stream caused.

* `plan`: which rollout subsets a seed's replays remove, the trained window, the measurement step
  (numpy only; the checklist reads the window from here);
* `replay`: the replay engine, bit-exact re-execution of the logged updates without a subset;
* `metagrad`: the exact metagradient of the behavior measure through the replayed updates.

Importing this package loads nothing (no torch): import the module you need.
"""
