"""From exact statistics to released answers: estimators and error bars, partition-selection
thresholds, quantiles by the exponential mechanism, post-processing (HAVING, ORDER BY, LIMIT,
consistent counts), the :class:`Result` and the dry-run :class:`Explanation`."""

from veil.release.explain import Explanation
from veil.release.result import Result, Usage

__all__ = ["Explanation", "Result", "Usage"]
