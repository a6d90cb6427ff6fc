// ops/blas_api.h — the CBLAS and OpenBLAS functions femtotron calls, under the names
// the linked BLAS gives them. PyPI's scipy-openblas32 (make BLAS=scipy-openblas: a
// recent OpenBLAS, where Debian's is 0.3.21) prefixes every symbol with scipy_ so
// that it can sit beside another BLAS in one process; its cblas.h declares only the
// prefixed names, so the unprefixed ones the code calls are mapped onto them here.
#ifndef FEMTOTRON_OPS_BLAS_API_H
#define FEMTOTRON_OPS_BLAS_API_H

#ifdef FEMTOTRON_SCIPY_OPENBLAS
#define cblas_sgemm scipy_cblas_sgemm
#define openblas_set_num_threads scipy_openblas_set_num_threads
#define openblas_get_config scipy_openblas_get_config
#define openblas_get_corename scipy_openblas_get_corename
#endif
#include <cblas.h>

#endif
