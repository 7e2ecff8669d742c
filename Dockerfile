# Kilolock container image.  See docs/deploying.md.
#
#   docker build -t kilolock .
#   docker run --rm -p 8080:8080 \
#       -e KL_DATABASE_URL=postgresql://kilolock:PASSWORD@db.example:5432/kilolock kilolock
#
# Without KL_DATABASE_URL Kilolock starts its embedded PostgreSQL in
# /var/lib/kilolock/data: mount a volume there (-v kilolock-data:/var/lib/kilolock)
# or every state is lost with the container.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Install the package (a normal, non-editable install: the twistd plugin in
# twisted/plugins/ must land in site-packages), then build Twisted's plugin
# cache while the file system is still writable, so the non-root server never
# tries to write it.
WORKDIR /src
COPY pyproject.toml setup.cfg README.md ./
COPY kilolock ./kilolock
COPY twisted ./twisted
RUN pip install . \
    && python -c "from twisted.plugin import IPlugin, getPlugins; list(getPlugins(IPlugin))" \
    && cd / && rm -rf /src

# An unprivileged user that owns only its data directory (PostgreSQL refuses
# to run as root, and Kilolock needs no privilege to listen on 8080).
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/kilolock \
        --create-home --shell /usr/sbin/nologin kilolock
USER kilolock
WORKDIR /var/lib/kilolock

# The embedded PostgreSQL's data directory (unused when KL_DATABASE_URL is set).
ENV KL_DATA_DIR=/var/lib/kilolock/data

# 8080: the state lanes; 8090: the control API (KL_AUTH_MODE=database only).
EXPOSE 8080 8090

HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"]

# -n: stay in the foreground, log to stdout (docker logs).
# --pidfile=: no pidfile.  After an unclean stop twistd's default
#   ./twistd.pid would be left behind naming PID 1, and the restarted twistd
#   (PID 1 again) would refuse to start ("Another twistd server is running").
# Options after `kilolock` are Kilolock's; all others come from KL_*
# variables (KL_DATABASE_URL, KL_AUTH_MODE, KL_AUTH_TOKEN, ...).
# `docker stop` sends SIGTERM: twistd shuts down cleanly.
CMD ["twistd", "-n", "--pidfile=", "kilolock", "--listen", "tcp:8080"]
