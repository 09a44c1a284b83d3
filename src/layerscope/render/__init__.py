"""The Profile's views and the subject-free text engines.

``rich.style`` draws from Python's ``random`` when it is first imported; every rich
import of layerscope is below this package, so importing it here first, with the state
put back, keeps the first render from moving the user's RNG.
"""

import random

_state = random.getstate()
try:
    import rich.style  # noqa: F401
finally:
    random.setstate(_state)
    del _state
