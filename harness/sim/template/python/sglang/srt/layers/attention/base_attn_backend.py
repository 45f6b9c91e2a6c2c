"""The interface every attention backend implements."""

from sglang.srt.model_executor.forward_batch_info import ForwardBatch


class AttentionBackend(object):
    def init_forward_metadata(self, forward_batch):
        """Prepare per-batch metadata (indices, plans) before the layers run."""
        raise NotImplementedError()

    def init_cuda_graph_state(self, max_bs, max_num_tokens):
        """Allocate the buffers that captured CUDA graphs read."""
        pass

    def init_forward_metadata_capture_cuda_graph(
        self, bs, num_tokens, req_pool_indices, seq_lens, encoder_lens, forward_mode, spec_info
    ):
        """Metadata for capturing the decode graph of batch size bs."""
        self.init_forward_metadata(ForwardBatch.decode(seq_lens.tolist()))

    def get_cuda_graph_seq_len_fill_value(self):
        return 1

    def forward(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        if forward_batch.forward_mode.is_decode():
            return self.forward_decode(q, k, v, layer, forward_batch, save_kv_cache=save_kv_cache, **kwargs)
        return self.forward_extend(q, k, v, layer, forward_batch, save_kv_cache=save_kv_cache, **kwargs)

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        raise NotImplementedError()

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        raise NotImplementedError()
