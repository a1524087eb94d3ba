"""The BehaviorTrace pytest plugin loads through its `pytest11` entry point (`pip install -e .`
installs it), so nothing needs registering here. With plugin autoloading disabled
(PYTEST_DISABLE_PLUGIN_AUTOLOAD=1) it is registered explicitly. (`pytest_plugins` is defined only
then: pytest refuses it in a conftest that is not at the rootdir, which this one is not when the
suite runs from another directory.)"""

import os

if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
    pytest_plugins = ["behaviortrace.fixtures.plugin"]
