"""A ``meta`` analysis that follows the kernels of the device the model will run on.

On ``meta`` some ops take another kernel than on a real device, which changes what is
saved for backward, the peaks and the FLOPs. ``steer(target, tensors_device)`` makes
them take the target's (``docs/target.md``):

>>> target = parse_target("h100")                            # doctest: +SKIP
>>> with steer(target, torch.device("meta")) as log:         # doctest: +SKIP
...     prof = ls.profile(ls.to_meta(model), x_meta, memory=True)
>>> log.as_dict()                                            # doctest: +SKIP
{'scaled_dot_product_attention': {'cudnn_attention': 2}}

- ``Target``/``parse_target``: the device ("cpu", "cuda", "h100", "a100", "l4", ...);
- ``steer``: the context, yielding a ``KernelLog`` of the kernels chosen;
- ``sdpa_backend``/``cuda_backend``: the SDPA backend choice alone.

``ls.profile(target=)`` and ``Profiler(target=)`` enter ``steer`` inside the session.
"""

from layerscope.collect.target.sdpa import (
    BACKEND_NAMES,
    SdpaCall,
    cpu_backend,
    cuda_backend,
    sdpa_backend,
)
from layerscope.collect.target.spec import (
    DEFAULT_CUDNN_VERSION,
    KNOWN_TARGETS,
    Target,
    parse_target,
)
from layerscope.collect.target.steer import (
    KernelLog,
    steer,
    steering_active,
)

__all__ = [
    "BACKEND_NAMES",
    "DEFAULT_CUDNN_VERSION",
    "KNOWN_TARGETS",
    "KernelLog",
    "SdpaCall",
    "Target",
    "cpu_backend",
    "cuda_backend",
    "parse_target",
    "sdpa_backend",
    "steer",
    "steering_active",
]
