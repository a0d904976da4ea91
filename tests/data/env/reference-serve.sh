# The reference deployment's `vllm serve` command line (deployment-4x-spark-vision), as the
# entrypoint must build it from head.env / worker.env. $RANK and $HEAD_IP are the reference's
# own placeholders; the test fills them per node. Filled in here, where the reference elides:
# <model-snapshot> is MODEL, the capture-size list is written out in full, and the
# speculative config has the three keys the launcher recipe for the same image uses.
vllm serve /model \
  --served-model-name deepseek-v4-vision --host 0.0.0.0 --port 8300 \
  --trust-remote-code --distributed-executor-backend mp \
  --nnodes 4 --node-rank $RANK --master-addr $HEAD_IP --master-port 29511 \
  --tensor-parallel-size 4 \
  --decode-context-parallel-size 2 --dcp-comm-backend ag_rs \
  --attention-backend B12X_MLA_SPARSE --moe-backend b12x --linear-backend b12x \
  --kv-cache-dtype fp8 --block-size 256 \
  --gpu-memory-utilization 0.75 \
  --max-model-len 393216 --max-num-seqs 8 --max-num-batched-tokens 8192 \
  --max-cudagraph-capture-size 56 \
  --compilation-config '{"cudagraph_mode":"FULL_AND_PIECEWISE","custom_ops":["all"],"cudagraph_capture_sizes":[1,2,3,4,5,6,7,11,15,19,23,27,31,35,39,43,47,51,55,56]}' \
  --async-scheduling --no-scheduler-reserve-full-isl --enable-chunked-prefill --enable-prefix-caching \
  --tokenizer-mode deepseek_v4 \
  --tool-call-parser deepseek_v4 --enable-auto-tool-choice \
  --reasoning-parser deepseek_v4 \
  --reasoning-config '{"reasoning_parser":"deepseek_v4","reasoning_start_str":"","reasoning_end_str":""}' \
  --default-chat-template-kwargs.thinking=true \
  --speculative-config '{"method":"dspark","num_speculative_tokens":6,"draft_sample_method":"greedy"}' \
  --disable-chunked-mm-input --limit-mm-per-prompt '{"image": 4}'
