"""Reference agents: the hand-written policies evolved agents are measured against
(docs/environments.md, "Reference agents"; public at `eqxevo.agents`);
`references.py` declares which belong to which environment."""
