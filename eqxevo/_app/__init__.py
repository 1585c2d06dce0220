"""eqxevo's application (commands, experiments, studies, the benchmark): private."""
