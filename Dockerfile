# syntax=docker/dockerfile:1
# Two images from one file, as named stages:
#
#   docker build --target serve -t rotkws-demo .     # the demo on the bundled model: CPU, no torch
#   docker run --rm -p 7860:7860 rotkws-demo          # then open http://localhost:7860
#
#   docker build --target train -t rotkws-train .    # training and export on CUDA GPUs
#   docker run --rm --gpus all -v /path/to/data:/data rotkws-train train --config training/configs/kws12.yaml
#
# The browser only lets a page use the microphone on https:// or http://localhost.
# podman builds it too (`--format docker` keeps the HEALTHCHECK); `make container-check` builds both
# images with podman on local Debian bases and runs them (.ci/container.py).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
# Must carry the torch that pyproject.toml pins (torch==2.14.1), or pip replaces it.
ARG TRAIN_IMAGE=pytorch/pytorch:2.14.1-cuda12.8-cudnn9-runtime

# ── serve-build: a virtual environment with the `app` extra and the bundled model ──
FROM ${PYTHON_IMAGE} AS serve-build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md ./
# rotkws/ holds the `rotkws` command; app/ the runtime, the demo and app/models/ (the bundled models,
# installed as package data); corpus/ the audio reading and data folders it shares with training
COPY rotkws/ rotkws/
COPY app/ app/
COPY corpus/ corpus/
RUN pip install "./[app]" \
 && python -c "from app.spotter import COMMAND_MODEL, DEFAULT_MODEL, WAKE_MODEL; \
                missing = [str(m) for m in (DEFAULT_MODEL, WAKE_MODEL, COMMAND_MODEL) if not m.is_file()]; \
                assert not missing, f'bundled models missing: {missing}'"

# ── serve: the slim runtime image, `rotkws demo` on all interfaces as a non-root user ──
FROM ${PYTHON_IMAGE} AS serve
RUN useradd --create-home --uid 10001 --user-group --shell /usr/sbin/nologin rotkws
COPY --from=serve-build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    GRADIO_ANALYTICS_ENABLED=False
USER 10001:10001
WORKDIR /home/rotkws
EXPOSE 7860
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:7860/config', timeout=4)"]
CMD ["rotkws", "demo", "--host", "0.0.0.0", "--port", "7860"]

# ── train: CUDA PyTorch with the `train` extra; data mounted at /data ──
FROM ${TRAIN_IMAGE} AS train
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    ROTKWS_DATA=/data
# `rotkws enroll` speaks the phrase with Debian's text-to-speech engines (unpinned: they follow
# the base image's release, as .ci/run's do)
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends espeak-ng flite festival festvox-kallpc16k festvox-kdlpc16k festvox-us-slt-hts \
 && rm -rf /var/lib/apt/lists/*
RUN useradd --create-home --uid 10001 --user-group rotkws
WORKDIR /home/rotkws/rotkws
COPY --chown=rotkws pyproject.toml README.md ./
COPY --chown=rotkws rotkws/ rotkws/
COPY --chown=rotkws model/ model/
COPY --chown=rotkws training/ training/
COPY --chown=rotkws export/ export/
COPY --chown=rotkws app/ app/
COPY --chown=rotkws corpus/ corpus/
COPY --chown=rotkws evaluation/ evaluation/
COPY --chown=rotkws benchmarks/ benchmarks/
# editable: runs, checkpoints and exports land in this working tree, which the user owns
RUN pip install -e "./[train]"
USER 10001:10001
ENTRYPOINT ["rotkws"]
CMD ["train", "--help"]
