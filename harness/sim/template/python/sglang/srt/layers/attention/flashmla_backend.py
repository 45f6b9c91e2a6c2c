"""FlashMLA decode kernels (page size 64, native FP8 KV cache); prefill uses FlashInfer MLA."""

from sglang._sim.kernels import flash_mla_with_kvcache
from sglang.srt.layers.attention.flashinfer_mla_backend import FlashInferMLAAttnBackend

PAGE_SIZE = 64


class FlashMLABackend(FlashInferMLAAttnBackend):
    def __init__(self, model_runner, skip_prefill=False):
        super().__init__(model_runner, skip_prefill=skip_prefill)
        self.page_size = model_runner.page_size
        self.decode_seq_lens = None

    def init_forward_metadata(self, forward_batch):
        if forward_batch.forward_mode.is_decode():
            self.decode_seq_lens = forward_batch.seq_lens_cpu
        else:
            super().init_forward_metadata(forward_batch)

    def init_forward_metadata_capture_cuda_graph(
        self, bs, num_tokens, req_pool_indices, seq_lens, encoder_lens, forward_mode, spec_info
    ):
        self.decode_seq_lens = seq_lens.tolist()

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, q_rope=None, k_rope=None):
        if k is not None and save_kv_cache:
            self.token_to_kv_pool.set_mla_kv_buffer(layer, forward_batch.out_cache_loc, k, k_rope)
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        o = flash_mla_with_kvcache(q, k_cache, self.decode_seq_lens, page_size=PAGE_SIZE)
        return o.view(-1, layer.tp_q_head_num * layer.v_head_dim)
