# Two commands a user needs: `make demo` and `make test`. Both create (or reuse) a local
# virtual environment in .venv and install the project into it.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.installed

.PHONY: demo test bench clean-venv

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

clean-venv:
	rm -rf $(VENV)
