"""The Rollout tab: a model's weighted split and mirror."""
