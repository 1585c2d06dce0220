"""The built-in names of environments and networks (`env.name`, `net.name`): one
table each, which the lookups (`registry`), the config's help (`config`) and
`eqxevo run --help` (`catalogue`) all read. Plain data: importing it loads
nothing.
"""

ENVS: dict[str, str] = {
    "chemotaxis": "eqxevo._src.envs.chemotaxis:Chemotaxis",
    "foraging": "eqxevo._src.envs.foraging:Foraging",
    "long_horizon": "eqxevo._src.envs.long_horizon:LongHorizon",
    "bandit": "eqxevo._src.envs.bandits:IndependentBandit",
    "reversal_bandit": "eqxevo._src.envs.bandits:ReversalBandit",
    "cue_reward": "eqxevo._src.envs.cue_reward:CueReward",
}
"""Environments by name: `"package.module:Class"`."""

ENV_PREFIXES: dict[str, str] = {
    "gymnax:<id>": "any gymnax environment (the rl extra)",
    "brax:<name>": "any Brax environment (the brax extra)",
    "playground:<name>": "MuJoCo Playground's DM Control suite (the playground extra)",
}
"""Environments from other libraries, by prefix: what each gives."""

NETS: dict[str, str] = {
    "sparse_rate": "eqxevo._src.nets.factories:sparse_rate",
    "sparse_lif": "eqxevo._src.nets.factories:sparse_lif",
    "recurrent": "eqxevo._src.nets.recurrent:RecurrentPolicy",
    "gru": "eqxevo._src.nets.gru:GRUPolicy",
    "mlp": "eqxevo._src.nets.factories:mlp",
}
"""Networks by name: a class or factory called as `constructor(obs_size,
action_size, **options, key=key)`."""

IMPORTED = "module:Class"
"""How any other class is named: `"package.module:Class"`."""


def choices(kind: str) -> str:
    """`"a | b | ... | module:Class"`: every name `env.name` (kind "env") or
    `net.name` (kind "net") takes."""
    names = [*ENVS, *ENV_PREFIXES] if kind == "env" else list(NETS)
    return " | ".join([*names, IMPORTED])


__all__ = ["ENVS", "ENV_PREFIXES", "IMPORTED", "NETS", "choices"]
