# paritybot: the GitHub App service (`paritybot serve`), as a container image.
#
#   docker build -t paritybot .
#   docker build --build-arg BASE_IMAGE=registry.example.org/python:3.12-slim -t paritybot .
#
# Three stages: `wheels` builds paritybot's wheel and collects every dependency's wheel (the only
# stage that talks to a package index), `venv` installs those wheels into /opt/paritybot offline,
# and the runtime stage copies that virtual environment only: no compiler caches, no wheels, no
# build-time CA bundle or index URL end up in the image that runs.
#
# BASE_IMAGE must be a Debian-based image with python3 (>= 3.11.2, Debian 12's) and its venv module; every stage
# uses it so the venv's interpreter path and ABI match. git and CA certificates are installed from
# apt when the base lacks them.

ARG BASE_IMAGE=python:3.12-slim

FROM ${BASE_IMAGE} AS wheels
# A mirror or proxy of PyPI, for sites without direct access.
ARG PIP_INDEX_URL=https://pypi.org/simple
# PEM certificates to trust in addition to pip's own bundle, for sites whose egress proxy
# re-signs TLS. Used in this stage only; the runtime image never sees them.
ARG EXTRA_CA_CERTS=
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
# A throwaway venv gives every base a pip (Debian's python3 ships none). Its site config carries
# the index and the CA bundle, so pip's build-isolation subprocesses use them too.
RUN set -eu; \
    python3 -m venv /opt/build; \
    /opt/build/bin/pip config --quiet --site set global.index-url "$PIP_INDEX_URL"; \
    if [ -n "$EXTRA_CA_CERTS" ]; then \
        certifi="$(/opt/build/bin/python -c 'import pip._vendor.certifi as c; print(c.where())')"; \
        { cat "$certifi"; printf '%s\n' "$EXTRA_CA_CERTS"; } >/opt/build/ca.pem; \
        /opt/build/bin/pip config --quiet --site set global.cert /opt/build/ca.pem; \
    fi
WORKDIR /src
# The dependencies exactly as uv.lock pins them, hashes checked (scripts/lock_exports.py writes both
# files from the lock), then paritybot's own wheel with the locked setuptools and no build isolation:
# nothing is resolved afresh, so the same tag builds the same packages today and next month.
COPY deploy/requirements.txt deploy/build-requirements.txt ./
RUN /opt/build/bin/pip install --quiet --require-hashes -r build-requirements.txt \
    && /opt/build/bin/pip wheel --quiet --require-hashes --wheel-dir /wheels -r requirements.txt
# Only what the wheel is built from, so editing docs or tests does not rebuild the wheels.
# README.md stays out on purpose: it is metadata only, and copying it would tie the cache to it.
COPY pyproject.toml ./
COPY bot ./bot
COPY handlers ./handlers
COPY runner ./runner
RUN /opt/build/bin/pip wheel --quiet --no-deps --no-build-isolation --wheel-dir /wheels .

FROM ${BASE_IMAGE} AS venv
COPY --from=wheels /wheels /wheels
COPY --from=wheels /src/requirements.txt /wheels/requirements.txt
# --no-index: the runtime's packages are exactly the wheels built above; `pip freeze` in the image
# is deploy/requirements.txt.
RUN python3 -m venv /opt/paritybot \
    && /opt/paritybot/bin/pip install --quiet --no-cache-dir --no-index --find-links /wheels \
        --require-hashes -r /wheels/requirements.txt \
    && /opt/paritybot/bin/pip install --quiet --no-cache-dir --no-index --no-deps /wheels/paritybot-*.whl \
    && /opt/paritybot/bin/paritybot --help >/dev/null

FROM ${BASE_IMAGE}
# git: the pipeline fetches each PR over HTTPS; ca-certificates: so git and the GitHub client
# trust github.com (or a GitHub Enterprise Server) through the system store.
RUN set -eu; \
    if ! command -v git >/dev/null 2>&1 || [ ! -s /etc/ssl/certs/ca-certificates.crt ]; then \
        apt-get update -qq; \
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends git ca-certificates >/dev/null; \
        rm -rf /var/lib/apt/lists/*; \
    fi; \
    git --version
# A fixed uid/gid so the data volume and a mounted key file can be given to it on the host.
ARG APP_UID=10001
RUN groupadd --system --gid "$APP_UID" paritybot \
    && useradd --system --uid "$APP_UID" --gid paritybot --home-dir /var/lib/paritybot \
        --no-create-home --shell /usr/sbin/nologin paritybot \
    && install -d -o paritybot -g paritybot -m 0750 \
        /var/lib/paritybot /var/lib/paritybot/workspaces /var/lib/paritybot/cache
COPY --from=venv /opt/paritybot /opt/paritybot
# What the one-time set-up page registers when `serve` starts with no App (deploy/README.md, step 2).
COPY deploy/app-manifest.yml /opt/paritybot/app-manifest.yml
ENV PATH=/opt/paritybot/bin:$PATH \
    PARITYBOT_APP_MANIFEST=/opt/paritybot/app-manifest.yml \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/var/lib/paritybot \
    PARITYBOT_DATABASE_URL=sqlite:////var/lib/paritybot/paritybot.db \
    PARITYBOT_WORKSPACE_ROOT=/var/lib/paritybot/workspaces \
    PARITYBOT_CACHE_ROOT=/var/lib/paritybot/cache \
    PARITYBOT_HOST=0.0.0.0 \
    PARITYBOT_PORT=8080
# The database, workspaces and caches: everything that must survive a restart.
VOLUME ["/var/lib/paritybot"]
WORKDIR /var/lib/paritybot
USER paritybot
EXPOSE 8080
# python's urllib, so the image needs no curl; urlopen raises on any non-2xx answer.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('PARITYBOT_PORT', '8080'), timeout=4)"]
ENTRYPOINT ["paritybot"]
CMD ["serve"]
