"""Quality-diversity: archives of elites over a descriptor space (docs/qd.md)."""
