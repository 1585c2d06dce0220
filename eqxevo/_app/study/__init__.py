"""Studies: ablation matrices (seeds x axes x arms) as one command (docs/studies.md)."""
