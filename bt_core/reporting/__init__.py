"""Reporting: the scorecard JSON (`scorecard`: Status, Verdict, Scorecard), and everything rendered
from the written JSON alone — terminal and Markdown tables, a self-contained HTML page, PNG figures
— and the comparison with a baseline scorecard. Nothing here reads artifacts or estimators."""
