# llama-cpp-python's OpenAI-compatible server, built with portable CPU flags (the
# default native build enables AMX, which crashes on some CPUs).
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends build-essential cmake \
    && rm -rf /var/lib/apt/lists/*
ENV CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
RUN pip install --no-cache-dir "llama-cpp-python[server]==0.3.36"
