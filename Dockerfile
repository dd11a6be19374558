# Codity's image: the `codity` command, for every service of docker-compose.yml (web,
# scheduler, worker, migrate). BASE_IMAGE is any image with Python >= 3.11 and its venv
# module (the official python image by default; tests/test_compose.py builds its own).
ARG BASE_IMAGE=python:3.12-slim
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/codity/bin:$PATH \
    CODITY_HOME=/var/lib/codity \
    CODITY_LOG_FORMAT=json

COPY pyproject.toml setup.py README.md /src/
COPY py /src/py
COPY sql /src/sql
RUN python3 -m venv /opt/codity \
    && /opt/codity/bin/pip install -q /src \
    && rm -rf /src \
    && useradd --system --create-home --home-dir /var/lib/codity codity

USER codity
WORKDIR /var/lib/codity
EXPOSE 3000
ENTRYPOINT ["codity"]
CMD ["--help"]
