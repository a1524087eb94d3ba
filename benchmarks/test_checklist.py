"""The checklist as tests: one test per (item × estimator). A failing item is the product working:
it is evidence that the method is confounded. Run: pytest benchmarks --estimator=NAME."""

import pytest

from checklist import ESTIMATOR_ITEMS


@pytest.mark.checklist
@pytest.mark.parametrize("item", ESTIMATOR_ITEMS, ids=[m.NAME for m in ESTIMATOR_ITEMS])
def test_checklist(item, bt_estimator, bt_evidence, bt_scorecard):
    verdict = item.evaluate(bt_estimator, bt_evidence)
    bt_scorecard.add(verdict)
    if verdict.status != "pass":
        pytest.fail(f"[{verdict.status}] {item.NAME} × {bt_estimator.name}: {verdict.reason}", pytrace=False)
