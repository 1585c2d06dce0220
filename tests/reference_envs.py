"""Reference environments for the tests: NumPy steps of the arena environments,
and `CounterEnv`, a tiny environment whose every value is known.

Each `*_step(state, action, params, noise)` takes NumPy dicts built from the
JAX state/params/noise (`as_numpy`) and returns `(obs, state, reward, done,
info)` as NumPy values (float64, written from docs/environments.md), so
property tests can compare the JAX step against it (`assert_step_matches`).
"""

import dataclasses
import math

import equinox as eqx
import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from eqxevo.envs import AbstractEnv


class CounterParams(eqx.Module):
    episode_length: jax.Array


class CounterState(eqx.Module):
    time: jax.Array
    noise: jax.Array


class CounterEnv(AbstractEnv):
    """obs = (time, last noise); reward = 1 + action[0]; done at episode_length."""

    obs_size: int = eqx.field(static=True, default=2)
    action_size: int = eqx.field(static=True, default=1)

    def default_params(self):
        return CounterParams(jnp.asarray(3, jnp.int32))

    def reset(self, key, params):
        del params
        noise = jr.uniform(key, (), jnp.float32)
        state = CounterState(jnp.zeros((), jnp.int32), noise)
        return jnp.stack([jnp.zeros((), jnp.float32), noise]), state

    def step(self, key, state, action, params):
        noise = jr.uniform(key, (), jnp.float32)
        time = state.time + 1
        obs = jnp.stack([time.astype(jnp.float32), noise])
        reward = 1.0 + action[0]
        done = time >= params.episode_length
        return obs, CounterState(time, noise), reward, done, {"time": time}


def float_arrays(shape, low, high):
    """Hypothesis strategy: float32 arrays of `shape` with elements in [low, high]."""
    return hnp.arrays(np.float32, shape, elements=st.floats(low, high, width=32))


# Ranges the reference tests draw params from (whichever fields a params class
# has; the rest keep their defaults): wide enough to reach deaths, floors and
# walls, short episodes so `done` is exercised.
PARAM_RANGES = {
    "length_scale": (0.05, 2.0),
    "sensor_noise": (0.0, 0.05),
    "sensor_angle": (0.0, 1.5),
    "sensor_distance": (0.0, 0.2),
    "drift_speed": (0.0, 0.05),
    "reward_length": (0.05, 1.0),
    "eat_radius": (0.02, 0.5),
    "eat_rate": (0.0, 1.0),
    "nutrition": (0.0, 2.0),
    "regrowth_rate": (0.0, 0.1),
    "metabolic_rate": (0.0, 0.05),
    "setpoint": (0.1, 0.9),
    "death_penalty": (0.0, 200.0),
    "toxicity": (0.0, 2.0),
    "taste_gain": (0.0, 100.0),
    "season_length": (1, 8),
    "swap_prob": (0.0, 1.0),
    "relocate_prob": (0.0, 1.0),
    "episode_length": (1, 50),
}


def params_draws(cls):
    """Hypothesis strategy: `cls` params, each field in `PARAM_RANGES` drawn."""
    names = {field.name for field in dataclasses.fields(cls)}
    return st.builds(
        cls,
        **{
            name: st.integers(low, high)
            if isinstance(low, int)
            else st.floats(low, high)
            for name, (low, high) in PARAM_RANGES.items()
            if name in names
        },
    )


def arena_states(cls, **draws):
    """Hypothesis strategy: `cls` states, the body anywhere in the unit arena and
    every other field from `draws` (ints as int32 arrays, the rest float32)."""
    pose = {
        "position": float_arrays((2,), -1.0, 1.0),
        "heading": st.floats(-3.14159, 3.14159),
    }

    def build(fields):
        return cls(
            **{
                name: jnp.asarray(v, jnp.int32 if isinstance(v, int) else jnp.float32)
                for name, v in fields.items()
            }
        )

    return st.fixed_dictionaries({**pose, **draws}).map(build)


def replay(reference, env, key, state, action, params):
    """The reference step of the transition `env.step(key, state, action, params)`
    makes, with the same random draws (`env.sample_noise`)."""
    noise = as_numpy(env.sample_noise(key, params))
    return reference(as_numpy(state), np.asarray(action), as_numpy(params), noise)


def assert_step_matches(out, expected, reward_tol=(1e-4, 1e-5), **state_atol):
    """A JAX step's `(obs, state, reward, done, info)` against the reference's.

    float32 against float64: the observation (log readings) to 1e-4, the
    reward to `reward_tol` (atol, rtol), every state field to 1e-5 in a unit
    arena unless `state_atol` names another tolerance (0: exact), the heading
    modulo 2 pi; `done` exactly, `info` to 1e-5.
    """
    obs, new, reward, done, info = out
    r_obs, r_new, r_reward, r_done, r_info = expected
    np.testing.assert_allclose(obs, r_obs, atol=1e-4, rtol=1e-4)
    for name, value in as_numpy(new).items():
        atol = state_atol.get(name, 1e-5)
        want = np.asarray(r_new[name], np.float64)
        if name == "heading":
            assert abs(wrap(float(value) - want)) <= atol
        elif atol == 0:
            np.testing.assert_array_equal(value, want, err_msg=name)
        else:
            np.testing.assert_allclose(value, want, atol=atol, err_msg=name)
    assert bool(done) == bool(r_done)
    np.testing.assert_allclose(reward, r_reward, atol=reward_tol[0], rtol=reward_tol[1])
    assert set(info) == set(r_info)
    for name, value in info.items():
        want = np.float64(r_info[name])
        np.testing.assert_allclose(np.float64(value), want, atol=1e-5, err_msg=name)


def as_numpy(module) -> dict:
    """An Equinox module of arrays -> dict of float64/int64/bool NumPy arrays."""
    out = {}
    for name, value in vars(module).items():
        array = np.asarray(jax.device_get(value))
        if array.dtype.kind == "f":
            array = array.astype(np.float64)
        out[name] = array
    return out


def wrap(angle):
    return np.mod(angle + math.pi, 2 * math.pi) - math.pi


def drive(position, heading, action, p):
    command = np.clip(np.asarray(action, np.float64)[:2], -1.0, 1.0)
    left, right = command * p["max_speed"]
    heading = wrap(heading + (right - left) / p["axle_length"])
    speed = 0.5 * (left + right)
    position = position + speed * np.array([math.cos(heading), math.sin(heading)])
    return np.clip(position, -p["arena_half"], p["arena_half"]), heading


def sensors(position, heading, p):
    out = []
    for side in (+1.0, -1.0):
        angle = heading + side * p["sensor_angle"]
        out.append(
            position
            + p["sensor_distance"] * np.array([math.cos(angle), math.sin(angle)])
        )
    return out  # [left, right]


def log_reading(value, noise, p):
    return math.log(max(value + p["sensor_noise"] * noise, p["detection_floor"]))


def field(point, sources, amounts, length_scale):
    total = 0.0
    for source, amount in zip(sources, amounts, strict=True):
        total += amount * math.exp(-np.linalg.norm(point - source) / length_scale)
    return total


# -- L0 ------------------------------------------------------------------------------


def chemotaxis_step(s, action, p, noise):
    position, heading = drive(s["position"], s["heading"], action, p)
    source = s["source"] + s["source_velocity"]
    velocity = s["source_velocity"].copy()
    bound = p["arena_half"]
    for i in range(2):
        if source[i] > bound:
            source[i] = 2 * bound - source[i]
            velocity[i] = -velocity[i]
        elif source[i] < -bound:
            source[i] = -2 * bound - source[i]
            velocity[i] = -velocity[i]
    time = s["time"] + 1
    distance = np.linalg.norm(position - source)
    reward = math.exp(-distance / p["reward_length"])
    obs = np.array(
        [
            log_reading(field(point, [source], [1.0], p["length_scale"]), n, p)
            for point, n in zip(
                sensors(position, heading, p), noise["sensor"], strict=True
            )
        ]
    )
    state = {
        "position": position,
        "heading": heading,
        "source": source,
        "source_velocity": velocity,
        "time": time,
    }
    info = {"distance": distance, "x": position[0], "y": position[1]}
    return obs, state, reward, time >= p["episode_length"], info


# -- L2 ------------------------------------------------------------------------------


def _eat(position, patches, amounts, p):
    k, m = amounts.shape
    intake = np.zeros(k)
    amounts = amounts.copy()
    for i in range(k):
        for j in range(m):
            d2 = np.sum((patches[i, j] - position) ** 2) / p["eat_radius"] ** 2
            eaten = p["eat_rate"] * amounts[i, j] * math.exp(-d2)
            intake[i] += eaten
            amounts[i, j] -= eaten
            amounts[i, j] += p["regrowth_rate"] * (1.0 - amounts[i, j])
    return intake, amounts


def _homeostasis(reserves, setpoint):
    scale = max(setpoint, 1.0 - setpoint)
    return max(1.0 - max(abs(r - setpoint) for r in reserves) / scale, 0.0)


def _fields_at_sensors(position, heading, patches, amounts, p, noise):
    readings = []
    left, right = sensors(position, heading, p)
    for k in range(amounts.shape[0]):
        for side, point in enumerate((left, right)):
            value = field(point, patches[k], amounts[k], p["length_scale"])
            readings.append(log_reading(value, noise[2 * k + side], p))
    return np.array(readings)


def foraging_step(s, action, p, noise):
    position, heading = drive(s["position"], s["heading"], action, p)
    intake, amounts = _eat(position, s["patches"], s["amounts"], p)
    reserves = np.clip(
        s["reserves"] + p["nutrition"] * intake - p["metabolic_rate"], 0.0, 1.0
    )
    time = s["time"] + 1
    dead = bool(np.any(reserves <= 0.0))
    balance = _homeostasis(reserves, p["setpoint"])
    reward = -p["death_penalty"] if dead else balance
    fields = _fields_at_sensors(
        position, heading, s["patches"], amounts, p, noise["sensor"]
    )
    obs = np.concatenate([fields, reserves - p["setpoint"]])
    state = {
        "position": position,
        "heading": heading,
        "reserves": reserves,
        "patches": s["patches"],
        "amounts": amounts,
        "time": time,
    }
    done = dead or time >= p["episode_length"]
    info = {"homeostasis": balance, "died": dead, "intake": intake.sum()}
    info.update({f"intake_{i}": intake[i] for i in range(len(intake))})
    return obs, state, reward, done, info


# -- L4 ------------------------------------------------------------------------------


def long_horizon_step(s, action, p, noise):
    position, heading = drive(s["position"], s["heading"], action, p)
    intake, amounts = _eat(position, s["patches"], s["amounts"], p)
    good = int(s["good"])
    nourishing, harmful = intake[good], intake[1 - good]
    gained = p["nutrition"] * nourishing - p["toxicity"] * harmful
    gut = np.asarray(s["gut"], np.float32)
    if gut.size:  # digestion: food tastes and nourishes len(gut) steps later
        digested, gut = gut[0], np.append(gut[1:], np.float32(gained))
    else:
        digested = gained
    taste = min(max(p["taste_gain"] * digested, -1.0), 1.0)
    taste += p["taste_noise"] * noise["taste"]
    time = int(s["time"]) + 1
    patches = s["patches"].copy()
    spread = p["patch_spread"] * p["arena_half"]
    if time % int(p["season_length"]) == 0:
        if noise["swap"] < p["swap_prob"]:
            good = 1 - good
        for k in range(2):
            for j in range(amounts.shape[1]):
                if noise["relocate"][k, j] < p["relocate_prob"]:
                    patches[k, j] = noise["patches"][k, j] * spread
                    amounts[k, j] = 1.0
    fields = _fields_at_sensors(position, heading, patches, amounts, p, noise["sensor"])
    obs = np.concatenate([fields, [taste]])
    state = {
        "position": position,
        "heading": heading,
        "patches": patches,
        "amounts": amounts,
        "good": good,
        "taste": taste,
        "time": time,
        "gut": gut,
    }
    info = {"nourishing_intake": nourishing, "harmful_intake": harmful}
    return obs, state, digested, time >= p["episode_length"], info
