"""Import before SkyRL on Python 3.11: SkyRL declares ``typing.TypedDict`` types inside pydantic models, which
pydantic accepts only from Python 3.12; as pydantic's error advises, ``typing_extensions.TypedDict`` takes its place
(a no-op from 3.12 on).

    import trainer.skyrl.py311  # noqa: F401  (first, before any SkyRL import)
"""

import sys
import typing

if sys.version_info < (3, 12):
    import typing_extensions

    typing.TypedDict = typing_extensions.TypedDict  # type: ignore[misc]
