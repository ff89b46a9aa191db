# One image for every wancrawl service; the command picks the role (consultant, agent, storage...).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY wancrawl ./wancrawl
COPY consultant ./consultant
COPY agent ./agent
COPY manager ./manager
COPY storage ./storage
COPY lab ./lab
COPY protos ./protos
COPY configs ./configs
RUN pip install --no-cache-dir .
EXPOSE 50051 50052 50060
CMD ["consultant", "serve", "--config", "/app/configs/consultant-hash.toml", "--listen", "0.0.0.0:50051"]
