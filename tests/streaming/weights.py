"""Random weights for the streaming tests' small networks."""

import numpy as np


def random_state(model, seed: int = 0) -> dict:
    """``{name: float32 array}``: every parameter of ``model`` uniform in [-0.5, 0.5), batch
    norms' running variances shifted to at least 0.5."""
    rng = np.random.default_rng(seed)
    state = {k: rng.uniform(-0.5, 0.5, v.shape).astype(np.float32)
             for k, v in model.state_dict().items()}
    for k in state:
        if k.endswith("running_var"):
            state[k] = np.abs(state[k]) + 0.5
    return state
