"""NumPy reference implementations of one step of every network piece (float64).

Written from the equations in the class docstrings (gathered in docs/networks.md),
edge by edge, without any of the layouts, so the JAX code is checked against an
independent formulation.
"""

import math

import numpy as np


def propagate(src, dst, mask, weights, x, num_neurons):
    """I[i] = sum over active edges e with dst[e] == i of w[e] x[src[e]]."""
    current = np.zeros(num_neurons)
    for e in range(len(src)):
        if mask[e]:
            current[dst[e]] += float(weights[e]) * float(x[src[e]])
    return current


def rate_step(potential, current, bias, tau, dt):
    alpha = dt / np.maximum(tau, dt)
    potential = potential + alpha * (current + bias - potential)
    return potential, np.tanh(potential)


def lif_step(potential, refractory, current, bias, tau, dt, threshold, reset, steps):
    potential = np.array(potential, np.float64)
    refractory = np.array(refractory, np.int64)
    spikes = np.zeros_like(potential)
    for i in range(potential.size):
        if refractory[i] > 0:
            potential[i] = reset
            refractory[i] -= 1
            continue
        beta = math.exp(-dt / max(float(tau[i]), dt))
        v = beta * potential[i] + (1 - beta) * (current[i] + bias[i])
        if v >= threshold:
            spikes[i] = 1.0
            potential[i] = reset
            refractory[i] = steps
        else:
            potential[i] = v
    return potential, refractory, spikes


def hebbian_increment(pre, post, a, b, c, d):
    return a * pre * post + b * pre + c * post + d


def stdp_increment(pre_trace, pre_spike, post_trace, post_spike, a_plus, a_minus):
    return a_plus * pre_trace * post_spike - a_minus * post_trace * pre_spike


def three_factor(weights, trace, modulation, learning_rate, bounds, mask):
    updated = np.clip(weights + learning_rate * modulation * trace, *bounds)
    return np.where(mask, updated, 0.0)


def inject(current, values, ids):
    current = current.copy()
    for k, i in enumerate(ids):
        current[i] += values[k]
    return current


def rate_policy_step(p, obs, s):
    """One `SparseRatePolicy` step on edge-list arrays.

    `p`: dict with src, dst, mask, weights (genome, [E]), bias, tau, dt,
    input_weight, input_ids, output_ids, and for plasticity a, b, c, d,
    learning_rate, trace_decay, bounds, modulation, modulator.
    `s`: dict with potential, rate and (plastic) weights, trace ([E]).
    Returns (action, new state dict).
    """
    n = len(p["bias"])
    plastic = "trace" in s
    w = s["weights"] if plastic else np.where(p["mask"], p["weights"], 0.0)
    current = propagate(p["src"], p["dst"], p["mask"], w, s["rate"], n)
    current = inject(current, p["input_weight"] * obs, p["input_ids"])
    potential, rate = rate_step(s["potential"], current, p["bias"], p["tau"], p["dt"])
    out = {"potential": potential, "rate": rate}
    if plastic:
        pre, post = s["rate"][p["src"]], rate[p["dst"]]
        inc = hebbian_increment(pre, post, p["a"], p["b"], p["c"], p["d"])
        # traces of masked-out slots are never read; compare active edges only
        trace = np.where(p["mask"], p["trace_decay"] * s["trace"] + inc, 0.0)
        if p["modulation"] == "neuron":
            m = rate[p["modulator"]]
            w = three_factor(w, trace, m, p["learning_rate"], p["bounds"], p["mask"])
        out |= {"weights": w, "trace": trace}
        if "baseline" in s:  # the reward baseline changes only in `reinforce`
            out["baseline"] = s["baseline"]
    return rate[list(p["output_ids"])], out


def spiking_policy_step(p, obs, s):
    """One `SparseSpikingPolicy` step on edge-list arrays (see `rate_policy_step`).

    Extra `p` keys: threshold, reset, refractory_steps, readout_decay,
    readout_weight, readout_bias; STDP: a_plus, a_minus, tau_plus, tau_minus,
    tau_eligibility. Extra `s` keys: refractory, spikes, readout, pre_trace,
    post_trace.
    """
    n = len(p["bias"])
    plastic = "trace" in s
    w = s["weights"] if plastic else np.where(p["mask"], p["weights"], 0.0)
    current = propagate(p["src"], p["dst"], p["mask"], w, s["spikes"], n)
    current = inject(current, p["input_weight"] * obs, p["input_ids"])
    potential, refractory, spikes = lif_step(
        s["potential"],
        s["refractory"],
        current,
        p["bias"],
        p["tau"],
        p["dt"],
        p["threshold"],
        p["reset"],
        p["refractory_steps"],
    )
    decay = p["readout_decay"]
    readout = decay * s["readout"] + (1 - decay) * spikes[list(p["output_ids"])]
    action = np.tanh(p["readout_weight"] * readout + p["readout_bias"])
    out = {
        "potential": potential,
        "refractory": refractory,
        "spikes": spikes,
        "readout": readout,
    }
    if plastic:
        src, dst = p["src"], p["dst"]
        inc = stdp_increment(
            s["pre_trace"][src],
            spikes[src],
            s["post_trace"][dst],
            spikes[dst],
            p["a_plus"],
            p["a_minus"],
        )
        dt = p["dt"]
        trace = np.where(
            p["mask"], math.exp(-dt / p["tau_eligibility"]) * s["trace"] + inc, 0.0
        )
        if p["modulation"] == "neuron":
            m = spikes[p["modulator"]]
            w = three_factor(w, trace, m, p["learning_rate"], p["bounds"], p["mask"])
        out |= {
            "weights": w,
            "trace": trace,
            "pre_trace": math.exp(-dt / p["tau_plus"]) * s["pre_trace"] + spikes,
            "post_trace": math.exp(-dt / p["tau_minus"]) * s["post_trace"] + spikes,
        }
    if "baseline" in s:  # the reward baseline changes only in `reinforce`
        out["baseline"] = s["baseline"]
    return action, out


def reinforce(p, s, reward, seen):
    """Reward-modulated update: w <- clip(w + eta m e) with the bounded reward
    prediction error m = clip(r) - E[clip(r)] (`p["reward_bound"]`,
    `p["baseline_decay"]`; either None switches its part off). E is the running
    average, bias-corrected by the `seen` rewards before this one."""
    bound, beta = p.get("reward_bound"), p.get("baseline_decay")
    r = reward if bound is None else float(np.clip(reward, -bound, bound))
    baseline = s.get("baseline", 0.0)
    expected = baseline / (1.0 - beta**seen) if beta is not None and seen else r
    m = r if beta is None else r - expected
    w = three_factor(
        s["weights"], s["trace"], m, p["learning_rate"], p["bounds"], p["mask"]
    )
    out = s | {"weights": w}
    if beta is not None:
        out["baseline"] = beta * baseline + (1.0 - beta) * r
    return out
