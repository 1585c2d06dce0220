"""Environments behind one functional, gymnax-compatible protocol: the arena
milestones L0, L2, L4, any gymnax environment (`GymnaxEnv`, the `rl` extra) and
any Brax environment (`BraxEnv`, the `brax` extra) and MuJoCo Playground's DM
Control suite (`PlaygroundEnv`, the `playground` extra); the physics libraries
are imported when an environment is made."""
