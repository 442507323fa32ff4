#!/usr/bin/env bash
# usage: probe.sh NAME SPECCONFIG  -> starts vLLM CPU with SmolLM2 + speculative config, 6 greedy requests, metrics
cd /work/main
name=$1; cfg=$2; port=18${RANDOM:0:3}
log=${LOGDIR:-/tmp}/$name.log
VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=0 .venv-engine/bin/python -m vllm.entrypoints.openai.api_server \
  --model .autoresearch/models/smollm2-135m-instruct --served-model-name m --port $port --host 127.0.0.1 \
  --max-model-len 2048 --enforce-eager ${cfg:+--speculative-config "$cfg"} > $log 2>&1 &
pid=$!
for i in $(seq 1 150); do curl -s 127.0.0.1:$port/health >/dev/null && break; kill -0 $pid 2>/dev/null || break; sleep 2; done
if ! curl -s 127.0.0.1:$port/health >/dev/null; then echo "$name: DID NOT START"; grep -iE "error|not supported|NotImplemented|raise" $log | tail -8; kill $pid 2>/dev/null; exit 1; fi
start=$(date +%s.%N)
for p in "Write a haiku about the sea." "List three prime numbers and explain why they are prime." "What is the capital of France? Answer in one sentence." "Explain what a hash table is."; do
  curl -s 127.0.0.1:$port/v1/chat/completions -H 'content-type: application/json' -d "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"$p\"}],\"max_tokens\":64,\"temperature\":0}" | python3 -c "import sys,json; d=json.load(sys.stdin); print(repr(d['choices'][0]['message']['content'][:120]), d['usage']['completion_tokens'])"
done
end=$(date +%s.%N); echo "$name: 4 requests in $(echo "$end - $start" | bc) s"
curl -s 127.0.0.1:$port/metrics | grep -E "^vllm:spec_decode" | head -20
kill $pid; wait $pid 2>/dev/null
