# One entry point. `make demo` and `make test` create the virtual environment on first use.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Which build of PyTorch the new environment gets (tools/install_torch.py): auto = the CPU build
# where there is no NVIDIA GPU, the default (CUDA) build where there is one; pypi = pip's own
# indexes; or an index URL. It applies when .venv is created (rm -rf .venv to change it).
TORCH_INDEX ?= auto
STAMP  := $(VENV)/.installed
export PYTHONPATH := $(CURDIR)/autograder$(if $(PYTHONPATH),:$(PYTHONPATH))
export MPLBACKEND := Agg

.PHONY: help venv demo lint test test-fast test-catalog lab release check-release links bench cohort adversarial bench-cohort clean

help:
	@echo "make demo           grade the demo cohort end to end (nbgrader) and print the table"
	@echo "make lint           ruff over the code and the notebooks (part of test and test-fast)"
	@echo "make test           the linter, then the whole test suite (what CI runs)"
	@echo "make test-fast      the linter, then only the tests that start no notebook kernel"
	@echo "make test-catalog   the catalogued mistakes and shortcuts make test grades only in-process, through nbgrader"
	@echo "make lab            JupyterLab on the lectures and exercises"
	@echo "make release        regenerate exercises/ from solutions/ (nbgrader generate_assignment) and checks/graded.py"
	@echo "make check-release  are exercises/ and checks/graded.py in sync with solutions/?"
	@echo "make links          rewrite Colab badges and setup cells and release tag in pyproject, then exercises/"
	@echo "make bench          autograde cost against a bare nbclient run"
	@echo "make cohort SUBMISSIONS=lms.zip   grade a whole cohort (every exercise): CSV, feedback, summary"
	@echo "make adversarial    grade the adversarial cohort (hostile/broken submissions) and print the summary"
	@echo "make bench-cohort   cohort grading: nbclient vs nbgrader, sequential vs parallel, sandbox cost"
	@echo "make gradescope EX=04     the exercise's Gradescope autograder zip (build/gradescope/)"
	@echo "make prairielearn EX=04   the exercise's PrairieLearn question and course files (build/prairielearn/)"

$(STAMP): requirements.txt pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 needed, found " + sys.version.split()[0]'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python tools/install_torch.py --index "$(TORCH_INDEX)"
	@# setuptools' note on every editable install of a flat layout ("folders in your working
	@# directory with the same name as your package may take precedence"): that folder is the package
	@# the triton extra: exercise and lecture 10's kernels (Linux; Triton's interpreter where there is no GPU)
	PYTHONWARNINGS="ignore:Editable installation" $(BIN)/python -m pip install -q -r requirements.txt -e ".[triton]"
	@# rfc3987-syntax, an optional part of jsonschema that nbformat pulls in, compiles its IRI grammars
	@# whenever jsonschema is imported: a core-second of every grading process (a student's wait on
	@# Gradescope); nothing here checks IRIs (jsonschema issue 1428). jsonschema works without it.
	$(BIN)/python -m pip uninstall -y -q rfc3987-syntax
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m awb_grader demo

lint: $(STAMP)
	$(BIN)/ruff check .

test: $(STAMP) lint
	$(BIN)/python -m pytest -n 2 --dist loadgroup -q -m "not full_catalog"

# every catalogued mistake through nbgrader and every shortcut in the sandboxed cohort run: the ones make test
# grades in-process only (tests/test_catalog.py, tests/test_shortcuts.py, tests/catalog_parts.py)
test-catalog: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist loadgroup -q -m full_catalog tests/test_catalog.py tests/test_shortcuts.py

test-fast: $(STAMP) lint
	$(BIN)/python -m pytest -q -m "not slow"

lab: $(STAMP)
	$(BIN)/jupyter lab

release: $(STAMP)
	$(BIN)/python -m awb_grader release

check-release: $(STAMP)
	$(BIN)/python -m awb_grader release --check

links: $(STAMP)
	$(BIN)/python tools/nbcells.py sync
	$(BIN)/python -m awb_grader release

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_autograde.py

SUBMISSIONS ?=
COHORT_ARGS ?=
cohort: $(STAMP)
	@test -n "$(SUBMISSIONS)" || (echo "usage: make cohort SUBMISSIONS=path/to/lms.zip [COHORT_ARGS='--workers 4']"; exit 2)
	$(BIN)/python -m awb_grader cohort $(SUBMISSIONS) $(COHORT_ARGS)

adversarial: $(STAMP)
	$(BIN)/python -m awb_grader adversarial

bench-cohort: $(STAMP)
	$(BIN)/python benchmarks/bench_cohort.py

clean:
	rm -rf build

# Grading platforms (issue 21): an autograder zip for Gradescope, a question for PrairieLearn.
.PHONY: gradescope prairielearn
EX ?=
PLATFORM_ARGS ?=
gradescope: $(STAMP)
	@test -n "$(EX)" || (echo "usage: make gradescope EX=04 [PLATFORM_ARGS='--visibility hidden --seeds SECRET']"; exit 2)
	$(BIN)/python -m awb_grader gradescope $(EX) $(PLATFORM_ARGS)

prairielearn: $(STAMP)
	@test -n "$(EX)" || (echo "usage: make prairielearn EX=04 [PLATFORM_ARGS='--image you/awb-grader --seeds SECRET']"; exit 2)
	$(BIN)/python -m awb_grader prairielearn $(EX) $(PLATFORM_ARGS)
