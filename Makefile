# Triton, the hard way. `make lab` to learn, `make test` to check everything CI checks.
#   make lab [PORT=8888]        install what is missing into .venv, start JupyterLab on notebooks/
#   make test                   install what is missing, run everything CI runs (CPU is fine)
#   make notebooks [FORCE=1]    regenerate notebooks/ and lessons/ from solutions/ (an edited notebook is kept; FORCE=1
#                               takes the course's newer version of one, after saving a backup)
#   make format                 ruff-format the code and the solutions' code cells, then regenerate
#   make bench                  GPU only: time every lesson's kernels against PyTorch, write results/
#   make present [PORT=8888]    JupyterLab on a copy of solutions/ with large fonts, for projecting
# TORCH_INDEX=https://download.pytorch.org/whl/cpu installs a small CPU-only torch on a machine with no GPU.

PYTHON ?= python3
VENV   ?= .venv
PORT   ?= 8888
IP     ?= 127.0.0.1
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST := $(PY) -m pytest -p no:cacheprovider
# Jupyter refuses to start as root (common in containers) unless told
ROOT_OK := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: install lab test lint format test-unit test-notebooks test-browser notebooks bench present clean

install: $(STAMP)

$(STAMP): requirements.txt pyproject.toml jupyter/overrides.json
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11 or newer is needed (found " + sys.version.split()[0] + "): set PYTHON=python3.11")'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(if $(TORCH_INDEX),$(PY) -m pip install -q --index-url $(TORCH_INDEX) $$(grep '^torch==' requirements.txt))
	$(PY) -m pip install -q -r requirements.txt
	@# the course's own packages (utils, lessons) importable from anywhere in the venv: a .pth pointing at this
	@# checkout, which is what `pip install -e .` amounts to, without a build and its warnings
	$(PY) -c 'import pathlib, sysconfig; pathlib.Path(sysconfig.get_paths()["purelib"], "triton-the-hard-way.pth").write_text("$(CURDIR)\n")'
	@# JupyterLab's defaults for this environment: no news pop-up over the end of a check's message
	mkdir -p $(VENV)/share/jupyter/lab/settings && cp jupyter/overrides.json $(VENV)/share/jupyter/lab/settings/
	@touch $@
	@echo "installed into $(VENV): $$($(PY) -c 'import torch, triton; print("torch", torch.__version__, "/ triton", triton.__version__)')"

lab: install
	@echo "Starting JupyterLab on notebooks/ — open the http://$(IP):$(PORT)/lab?token=… URL printed below."
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks --ip=$(IP) --port=$(PORT) $(if $(DISPLAY),,--no-browser) $(ROOT_OK)

present: install
	@echo "Presenter mode: solutions without their solution markers, copied into build/present (the outputs you make"
	@echo "there are not saved into the course's sources), with large fonts and wrapped code lines (present/settings)."
	$(PY) -m utils.notebooks --present build/present
	JUPYTERLAB_SETTINGS_DIR=$(CURDIR)/present/settings $(VENV)/bin/jupyter lab --notebook-dir=build/present \
		--ip=$(IP) --port=$(PORT) $(if $(DISPLAY),,--no-browser) $(ROOT_OK)

notebooks: install
	$(PY) -m utils.notebooks $(if $(FORCE),--force)

# Chromium (for the browser test) installs from the system's packages in the background while the unit tests run (on
# a fresh machine, a download of a minute or two that would otherwise come first); then the solution notebooks and the
# browser test run side by side (the browser test mostly waits on the page), each one's output printed when it ends.
test: install
	@mkdir -p build
	@bash scripts/install-chromium.sh > build/install-chromium.log 2>&1 & chromium=$$!; \
	$(MAKE) --no-print-directory lint test-unit; status=$$?; \
	wait $$chromium; cat build/install-chromium.log; \
	[ $$status -eq 0 ] && $(MAKE) --no-print-directory -j2 --output-sync=target test-notebooks test-browser

# the generated lessons/ are checked with the rest: a notebook's exported code must be as clean as any module
LINTED := conftest.py utils lessons bench tests solutions
lint: install
	$(VENV)/bin/ruff check $(LINTED)
	$(VENV)/bin/ruff format --check $(LINTED)

format: install
	$(VENV)/bin/ruff check --fix $(LINTED)
	$(VENV)/bin/ruff format $(LINTED)
	$(PY) -m utils.notebooks

test-unit: install
	$(PYTEST) -n 2 --dist worksteal tests --ignore=tests/test_browser.py

test-notebooks: install
	$(PYTEST) -n 2 --dist loadfile --nbval-lax --nbval-current-env solutions

test-browser: install
	-@bash scripts/install-chromium.sh
	$(PYTEST) -rs tests/test_browser.py  # -rs: a skip says why; under CI=true a missing browser fails

bench: install
	$(PY) -m bench

clean:
	rm -rf $(VENV) .pytest_cache results/browser
