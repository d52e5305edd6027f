"""Where the repository and the test data are, for tests at any depth of tests/."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]  # the checkout's root
TESTS = REPO / "tests"
FIXTURES = TESTS / "fixtures"
