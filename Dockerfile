# memstream worker / CLI image. Production services (Kafka, Neo4j, Milvus) come from
# docker-compose.yml; everything memstream needs installs from wheels, no compiler.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
# Metadata first, so the dependency layer is rebuilt only when dependencies change.
COPY pyproject.toml README.md ./
RUN mkdir -p memstream topics streams sinks \
    && touch memstream/__init__.py topics/__init__.py streams/__init__.py sinks/__init__.py \
    && pip install '.[otel]' \
    && pip uninstall -y memstream
COPY memstream ./memstream
COPY topics ./topics
COPY streams ./streams
COPY sinks ./sinks
RUN pip install --no-deps . && rm -rf /src

RUN useradd --create-home --uid 10001 memstream \
    && mkdir -p /data && chown memstream:memstream /data
USER memstream
WORKDIR /data
ENV MEMSTREAM_DATA_DIR=/data

ENTRYPOINT ["memstream"]
CMD ["worker"]
