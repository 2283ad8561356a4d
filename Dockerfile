# The chat front as a container image: the same code and pinned runtime requirements `make run` uses, served by
# uvicorn.
#   docker build -t horde-chat-front .
#   docker run --stop-timeout 45 -p 8000:8000 -e HORDE_URL=https://aihorde.net/api -e DJANGO_ALLOWED_HOSTS=chat.example.org \
#     -e DJANGO_SECRET_KEY=... horde-chat-front
# compose.yaml runs it with a Redis and the development Horde, as `make run` does.
FROM python:3.13-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /app
# The runtime lock only (requirements.txt: the exact versions `make run` and CI test; the test and lint locks stay
# out), in a layer of their own that a change of the code alone does not rebuild.
COPY requirements.txt /tmp/requirements.txt
RUN python -m pip install -r /tmp/requirements.txt && rm /tmp/requirements.txt

# Then the distribution itself (the apps and the operations routes with their guides, from docs/ through the link
# front_operations/guides), installed as a package; the sources are removed after the install.
COPY README.md /tmp/src/
COPY pyproject.toml /tmp/src/
COPY chat /tmp/src/chat
COPY images /tmp/src/images
COPY models_list /tmp/src/models_list
COPY front_operations /tmp/src/front_operations
COPY docs /tmp/src/docs
RUN python -m pip install --no-deps /tmp/src && rm -rf /tmp/src

# The project that serves the apps (oaifront) and the development Horde (devhorde), which the distribution leaves
# out: run from the working directory, as a Django project's own package is.
COPY oaifront /app/oaifront
COPY devhorde /app/devhorde

RUN useradd --system --no-create-home front
USER front

EXPOSE 8000
# WORKERS: uvicorn worker processes (each has its own pools; they share the Redis). FORWARDED_ALLOW_IPS: the reverse
# proxies whose X-Forwarded-For/-Proto uvicorn trusts.
# The graceful timeout (40 s) outlasts a native call in flight (HORDE_OAI_HORDE_TIMEOUT_SECONDS, 30) so its request is
# cancelled at the Horde; Docker's own stop timeout (10 s by default) must be longer: --stop-timeout 45.
ENV WORKERS=2 \
    FORWARDED_ALLOW_IPS=127.0.0.1
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s \
  CMD ["python", "-c", "import httpx; httpx.get('http://127.0.0.1:8000/healthz', timeout=4).raise_for_status()"]
# uvicorn's bounds for these settings (--ws none, the backlog, the keep-alive timeout, --limit-concurrency from the
# caps): printed by `python -m oaifront.serve`, which ends the container in one line on a setting it cannot use.
CMD ["sh", "-c", "options=$(python -m oaifront.serve) && exec uvicorn oaifront.asgi:application --host 0.0.0.0 --port 8000 --workers \"$WORKERS\" --proxy-headers --forwarded-allow-ips \"$FORWARDED_ALLOW_IPS\" --no-access-log $options --timeout-graceful-shutdown 40"]
