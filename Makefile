# Two commands a user needs: `make demo` and `make test`. Both create (or reuse) a local
# virtual environment in .venv and install the project into it.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed

.PHONY: demo test bench test-lower-bounds clean-venv

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/teleop demo

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	for b in sim wbc retarget promp video fec record; do $(VENV)/bin/teleop bench $$b || exit 1; done

# The tests on every dependency's declared lower bound (tools/lower_bounds.py), in their own
# environment; needs the package index, not run by CI.
LOWER_VENV ?= .venv-lower
test-lower-bounds:
	$(PYTHON) -m venv $(LOWER_VENV)
	$(PYTHON) tools/lower_bounds.py --extra dev > $(LOWER_VENV)/constraints.txt
	$(LOWER_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LOWER_VENV)/bin/python -m pip install --quiet -c $(LOWER_VENV)/constraints.txt -e '.[dev]'
	cat $(LOWER_VENV)/constraints.txt
	$(LOWER_VENV)/bin/python -m pytest -q

clean-venv:
	rm -rf $(VENV) $(LOWER_VENV)
