"""NumPy reference steps of the arena environments (float64, written from the docs).

Each `*_step(state, action, params, noise)` takes NumPy dicts built from the
JAX state/params/noise (`as_numpy`) and returns `(obs, state, reward, done,
info)` as NumPy values, so property tests can compare the JAX step against it.
`float_arrays` draws the states' arrays.
"""

import math

import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import jax
import numpy as np


def float_arrays(shape, low, high):
    """Hypothesis strategy: float32 arrays of `shape` with elements in [low, high]."""
    return hnp.arrays(np.float32, shape, elements=st.floats(low, high, width=32))


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
    return obs, state, reward, time >= p["episode_length"], {"distance": distance}


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
    return obs, state, reward, done, info


# -- L4 ------------------------------------------------------------------------------


def long_horizon_step(s, action, p, noise):
    position, heading = drive(s["position"], s["heading"], action, p)
    intake, amounts = _eat(position, s["patches"], s["amounts"], p)
    good = int(s["good"])
    nourishing, harmful = intake[good], intake[1 - good]
    gained = p["nutrition"] * nourishing - p["toxicity"] * harmful
    energy = min(max(s["energy"] + gained - p["metabolic_rate"], 0.0), 1.0)
    taste = min(max(p["taste_gain"] * gained, -1.0), 1.0)
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
    dead = energy <= 0.0
    balance = _homeostasis([energy], p["setpoint"])
    reward = -p["death_penalty"] if dead else balance
    if dead:
        position = noise["rebirth"][:2] * spread
        heading = noise["rebirth"][2] * math.pi
        energy = p["initial_energy"]
    fields = _fields_at_sensors(position, heading, patches, amounts, p, noise["sensor"])
    obs = np.concatenate([fields, [energy - p["setpoint"], taste]])
    state = {
        "position": position,
        "heading": heading,
        "energy": energy,
        "patches": patches,
        "amounts": amounts,
        "good": good,
        "taste": taste,
        "time": time,
    }
    info = {
        "homeostasis": balance,
        "died": dead,
        "nourishing_intake": nourishing,
        "harmful_intake": harmful,
    }
    return obs, state, reward, time >= p["episode_length"], info
