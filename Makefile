# Closed network: no usage reports, no telemetry.
export RAY_USAGE_STATS_ENABLED := 0
export RAY_USAGE_STATS_REPORT_URL := http://127.0.0.1:9/
export MLFLOW_DISABLE_TELEMETRY := true
export DO_NOT_TRACK := true

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install system-deps docs quickstart test test-fast test-heavy test-cluster test-slurm usb-reference report clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch/torchvision first, pinned: other versions do not import together here
	$(PY) -m pip install -q torch==2.14.1 torchvision==0.29.1
	# setuptools' "Editable installation … folders in your working directory with the same name as your package"
	# notice is about this checkout itself (the packages are imported from it on purpose): not shown
	PYTHONWARNINGS='ignore:Editable installation' $(PY) -m pip install -q -e '.[dev]'
	touch $@

install: $(VENV)/.installed

## USB (semilearn) as a test-time reference for tests/mutexmatch/algorithms/usb/ (skipped without it). --no-deps:
## its ~40 pinned requirements are not needed to run a train_step; the tests stub the optional modules it imports.
## timm builds USB's ViTs (tests/mutexmatch/models/test_vit_usb.py; it needs only torch, torchvision and pyyaml at
## import); safetensors reads model.pretrained's .safetensors files (optional at run time, tested here).
usb-reference: install
	$(PY) -m pip install -q --no-deps semilearn==0.3.2 timm==1.0.31 safetensors==0.8.0

## docs/config.md, generated from the config schema and the algorithm registry (a test fails when it is stale).
docs: install
	$(PY) -m mutexmatch.config --doc > docs/config.md

## The main job on the embedded default: local Ray, MLflow in ./mlflow.db, the `digits` dataset; the report with
## report.pdf where pdflatex and TeX Live's recommended packages are installed (`make system-deps`), else without it,
## its last lines saying how to make it.
comma := ,
QUICKSTART_FORMATS = md,tex,png$(if $(shell command -v pdflatex >/dev/null 2>&1 && kpsewhich booktabs.sty 2>/dev/null),$(comma)pdf)
quickstart: install
	$(PY) -m orchestration.sweep experiments/quickstart.yaml --register-model mutexmatch-quickstart
	$(PY) -m reports.build experiments/quickstart.yaml --out reports/out/quickstart --format $(QUICKSTART_FORMATS)

# report.pdf and its tests: pdflatex and Latin Modern (vector T1 fonts) from Debian's TeX Live, poppler-utils for
# pdffonts/pdftotext, which check the PDF; installed when missing and run as root, else the command to run is printed.
TEX_DEBS := texlive-latex-base texlive-latex-recommended lmodern poppler-utils
system-deps:
	@if command -v pdflatex >/dev/null 2>&1 && command -v pdffonts >/dev/null 2>&1 \
	    && kpsewhich lmodern.sty >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    $(TEX_DEBS) >/dev/null; \
	else echo "LaTeX tools missing: sudo apt-get install --no-install-recommends $(TEX_DEBS)" >&2; exit 1; fi

# usb-reference: the lockstep tests against USB's semilearn 0.3.2 (a test-time reference, installed --no-deps) run too
test: install system-deps usb-reference
	$(PY) -m pytest -q --durations=20 -m "not heavy and not cluster and not slurm"

## --smoke over every experiment YAML on generated fixture datasets (~27 min on 2 cores)
test-heavy: install system-deps
	$(PY) -m pytest -q -m heavy

## The container cluster for real: images built on a debootstrap base, Postgres + S3 stand-in + MLflow server + Ray head
## + 2 workers, a sweep through `ray job submit`, a worker kill, a head kill + --resume, an MLflow outage; all torn
## down (docker/README.md, "Run for real on this machine": wall time). Needs root for dockerd and debootstrap.
test-cluster: install
	PYTHON=$(abspath $(PY)) docker/local/test-cluster.sh

## A real Slurm on this machine (docker/slurm/README.md, "Run for real here": wall time): MUNGE, slurmctld and slurmd
## started in a private folder, the quickstart-sized sweep through docker/slurm/sweep.sbatch hitting its time limit
## (USR1, requeue, --resume auto) while a second user's job runs beside it; daemons stopped by their pid files.
## Needs root and `apt-get install slurm-wlm munge`. Not part of `make test` (marker slurm; minutes long).
test-slurm: install
	PYTHON=$(abspath $(PY)) docker/slurm/test-slurm.sh

test-fast: install
	$(PY) -m pytest -q -m "not slow and not heavy and not cluster and not slurm"

clean:
	rm -rf outputs ray_results reports/out .pytest_cache
