// tests/gpu/cpu_ref.h — the CPU kernels, compiled into the GPU test driver under
// the prefix cpu_ (cpu_matmul_forward, ...), so that one program can run every op
// on both backends and compare them. Include first, before any other header of
// the project; then include "ops/ops.h" for the CUDA functions. A name of ops.h
// left off this list defines its function twice and the link fails, so the list
// stays complete.
#ifndef FEMTOTRON_CPU_REF_H
#define FEMTOTRON_CPU_REF_H


#define ops_init cpu_ops_init
#define ops_backend_name cpu_ops_backend_name
#define ops_has_bf16 cpu_ops_has_bf16
#define ops_device cpu_ops_device
#define ops_device_memory cpu_ops_device_memory
#define ops_set_matmul_bf16 cpu_ops_set_matmul_bf16
#define ops_matmul_bf16 cpu_ops_matmul_bf16
#define ops_set_attention_cudnn cpu_ops_set_attention_cudnn
#define ops_keep_bf16_weights cpu_ops_keep_bf16_weights
#define ops_bf16_weights_changed cpu_ops_bf16_weights_changed
#define ops_set_workspace cpu_ops_set_workspace
#define ops_upload cpu_ops_upload
#define ops_download cpu_ops_download
#define ops_sync cpu_ops_sync
#define zero_f64 cpu_zero_f64
#define ops_upload_queued cpu_ops_upload_queued
#define ops_host_free cpu_ops_host_free
#define ops_host_alloc cpu_ops_host_alloc
#define copy_f32 cpu_copy_f32
#define move_f32 cpu_move_f32
#define zero_f32 cpu_zero_f32
#define copy_rows_f32 cpu_copy_rows_f32
#define gather_rows_f32 cpu_gather_rows_f32
#define scatter_rows_f32 cpu_scatter_rows_f32
#define matmul_forward cpu_matmul_forward
#define matmul_forward_ld cpu_matmul_forward_ld
#define matmul_forward_add cpu_matmul_forward_add
#define matmul_backward cpu_matmul_backward
#define matmul_backward_ld cpu_matmul_backward_ld
#define matmul_backward_ld16 cpu_matmul_backward_ld16
#define ops_check_ids cpu_ops_check_ids
#define embedding_forward cpu_embedding_forward
#define embedding_backward cpu_embedding_backward
#define embedding_forward_range cpu_embedding_forward_range
#define embedding_copy_range cpu_embedding_copy_range
#define embedding_backward_range cpu_embedding_backward_range
#define rmsnorm_forward cpu_rmsnorm_forward
#define rmsnorm_backward cpu_rmsnorm_backward
#define rmsnorm_backward_with_bf16 cpu_rmsnorm_backward_with_bf16
#define rmsnorm_rebuild cpu_rmsnorm_rebuild
#define rmsnorm_forward_to_bf16 cpu_rmsnorm_forward_to_bf16
#define rmsnorm_rebuild_to_bf16 cpu_rmsnorm_rebuild_to_bf16
#define residual_forward cpu_residual_forward
#define rope_tables cpu_rope_tables
#define rope_tables_at cpu_rope_tables_at
#define rope_forward cpu_rope_forward
#define rope_backward cpu_rope_backward
#define rope_backward_to_bf16 cpu_rope_backward_to_bf16
#define rope_forward_bf16 cpu_rope_forward_bf16
#define rope_backward_bf16 cpu_rope_backward_bf16
#define attention_scratch_floats cpu_attention_scratch_floats
#define attention_block_init cpu_attention_block_init
#define attention_block_forward cpu_attention_block_forward
#define attention_block_finish cpu_attention_block_finish
#define attention_rowdot cpu_attention_rowdot
#define attention_block_backward cpu_attention_block_backward
#define attention_forward cpu_attention_forward
#define attention_backward cpu_attention_backward
#define attention_forward_bf16 cpu_attention_forward_bf16
#define attention_backward_bf16 cpu_attention_backward_bf16
#define swiglu_forward cpu_swiglu_forward
#define swiglu_backward cpu_swiglu_backward
#define round_to_bf16 cpu_round_to_bf16
#define matmul_forward_bf16 cpu_matmul_forward_bf16
#define matmul_forward_from_bf16 cpu_matmul_forward_from_bf16
#define matmul_forward_from_bf16_add cpu_matmul_forward_from_bf16_add
#define matmul_backward_from_bf16 cpu_matmul_backward_from_bf16
#define matmul_backward_bf16 cpu_matmul_backward_bf16
#define widen_from_bf16 cpu_widen_from_bf16
#define swiglu_forward_bf16 cpu_swiglu_forward_bf16
#define swiglu_backward_to_bf16 cpu_swiglu_backward_to_bf16
#define swiglu_backward_bf16 cpu_swiglu_backward_bf16
#define matmul_backward_input_to_bf16 cpu_matmul_backward_input_to_bf16
#define matmul_backward_from_bf16_to_bf16 cpu_matmul_backward_from_bf16_to_bf16
#define matmul_backward_bf16_to_bf16 cpu_matmul_backward_bf16_to_bf16
#define cross_entropy_forward_backward cpu_cross_entropy_forward_backward
#define cross_entropy_forward_backward_bf16 cpu_cross_entropy_forward_backward_bf16
#define cross_entropy_forward cpu_cross_entropy_forward
#define ce_shard_max cpu_ce_shard_max
#define ce_shard_sums cpu_ce_shard_sums
#define ce_shard_finish cpu_ce_shard_finish
#define sum_squares cpu_sum_squares
#define adamw_update cpu_adamw_update
#define moe_dispatch_backward cpu_moe_dispatch_backward
#define moe_combine_backward cpu_moe_combine_backward
#define moe_combine cpu_moe_combine
#define moe_dispatch cpu_moe_dispatch
#define ops_set_threads cpu_ops_set_threads
#define ops_blas_name cpu_ops_blas_name
#define matmul_cpu_row_blocks cpu_matmul_cpu_row_blocks
// ops/matmul_bf16_cpu.h's own names (a second copy of them is in the CPU build's
// objects, which tests/shell/test_cuda_build.sh's gpu_ops_cpu links too)
#define cpu_bf16_operand cpu_ref_bf16_operand
#define cpu_gemm_bf16 cpu_ref_gemm_bf16
#define cpu_bf16_copy_for_update cpu_ref_bf16_copy_for_update
#define cpu_attention_amx cpu_ref_attention_amx
#define cpu_attention_use_amx cpu_ref_attention_use_amx
#define attention_block_forward_amx cpu_ref_attention_block_forward_amx
#define attention_block_backward_amx cpu_ref_attention_block_backward_amx

#include "ops/attention_cpu.c"
#include "ops/attention_amx_cpu.c"
#include "ops/buffers_cpu.c"
#include "ops/cpu.c"
#include "ops/matmul_cpu.c"
#include "ops/matmul_bf16_cpu.c"
#include "ops/loss_optim_cpu.c"
#include "ops/moe_dispatch_cpu.c"

// The CUDA names again, and ops.h once more (its guard reopened) to declare them.
#undef ops_init
#undef ops_backend_name
#undef ops_has_bf16
#undef ops_device
#undef ops_device_memory
#undef ops_set_matmul_bf16
#undef ops_matmul_bf16
#undef ops_set_attention_cudnn
#undef ops_keep_bf16_weights
#undef ops_bf16_weights_changed
#undef ops_set_workspace
#undef ops_upload
#undef ops_download
#undef ops_sync
#undef zero_f64
#undef ops_upload_queued
#undef ops_host_free
#undef ops_host_alloc
#undef copy_f32
#undef move_f32
#undef zero_f32
#undef copy_rows_f32
#undef gather_rows_f32
#undef scatter_rows_f32
#undef matmul_forward
#undef matmul_forward_ld
#undef matmul_forward_add
#undef matmul_backward
#undef matmul_backward_ld
#undef matmul_backward_ld16
#undef ops_check_ids
#undef embedding_forward
#undef embedding_backward
#undef embedding_forward_range
#undef embedding_copy_range
#undef embedding_backward_range
#undef rmsnorm_forward
#undef rmsnorm_backward
#undef rmsnorm_backward_with_bf16
#undef rmsnorm_rebuild
#undef rmsnorm_forward_to_bf16
#undef rmsnorm_rebuild_to_bf16
#undef residual_forward
#undef rope_tables
#undef rope_tables_at
#undef rope_forward
#undef rope_backward
#undef rope_backward_to_bf16
#undef rope_forward_bf16
#undef rope_backward_bf16
#undef attention_scratch_floats
#undef attention_block_init
#undef attention_block_forward
#undef attention_block_finish
#undef attention_rowdot
#undef attention_block_backward
#undef attention_forward
#undef attention_forward_bf16
#undef attention_backward_bf16
#undef attention_backward
#undef swiglu_forward
#undef swiglu_backward
#undef round_to_bf16
#undef matmul_forward_bf16
#undef matmul_forward_from_bf16
#undef matmul_forward_from_bf16_add
#undef matmul_backward_from_bf16
#undef matmul_backward_bf16
#undef widen_from_bf16
#undef swiglu_forward_bf16
#undef swiglu_backward_to_bf16
#undef swiglu_backward_bf16
#undef matmul_backward_input_to_bf16
#undef matmul_backward_from_bf16_to_bf16
#undef matmul_backward_bf16_to_bf16
#undef cross_entropy_forward_backward
#undef cross_entropy_forward_backward_bf16
#undef cross_entropy_forward
#undef ce_shard_max
#undef ce_shard_sums
#undef ce_shard_finish
#undef sum_squares
#undef adamw_update
#undef moe_dispatch_backward
#undef moe_combine_backward
#undef moe_combine
#undef moe_dispatch
#undef ops_set_threads
#undef ops_blas_name
#undef matmul_cpu_row_blocks
#undef cpu_bf16_operand
#undef cpu_gemm_bf16
#undef cpu_bf16_copy_for_update
#undef FEMTOTRON_OPS_H
#undef FEMTOTRON_OPS_MATMUL_H
#include "ops/ops.h"

#endif
