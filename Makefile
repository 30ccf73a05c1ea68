# Two commands for a fresh machine: `make demo` and `make test`. Each creates .venv on first use.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test container-check clean-venv

# Only the `app` extra: the demo needs no torch.
$(VENV)/.app: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[app]"
	touch $@

# Everything: training, export, runtime, the bench's peer engines and test tools. torch==2.14.1 comes from this machine's disk.
$(VENV)/.all: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[app,train,dev,peers]"
	touch $(VENV)/.app $@

# The JavaScript runtime (app/web/, tests/web/): onnxruntime-node/-web as package-lock.json pins them;
# the demo serves onnxruntime-web's files to its /web/ page, which then needs no CDN.
node_modules/.package-lock.json: package.json package-lock.json
	@command -v npm >/dev/null || { echo "npm not found: the JavaScript tests will skip and the demo's /web/ \
	page will fetch onnxruntime-web from its CDN"; exit 0; }; \
	npm ci --no-audit --no-fund

DEMO_ARGS ?=
demo: $(VENV)/.app node_modules/.package-lock.json
	$(BIN)/rotkws demo $(DEMO_ARGS)

test: $(VENV)/.all node_modules/.package-lock.json
	$(BIN)/python -m pytest -q -ra

# The Dockerfile's serve and train images built with podman and run, their figures into BENCHMARKS.md
# (.ci/container.py: root, ~8 GB of disk, ~4 GB downloaded). Installs podman and mmdebstrap
# from Debian where they are missing.
container-check:
	@command -v podman >/dev/null && command -v mmdebstrap >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman mmdebstrap >/dev/null; }
	nice -n 19 $(PY) .ci/container.py

clean-venv:
	rm -rf $(VENV)
