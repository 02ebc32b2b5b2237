// Built into the fake NCCL: muster declares the NCCL entry points itself (probes/nccl_api.h)
// so that it builds without the header. Here, where the real header is installed, every value
// and size muster relies on is checked against it: a mismatch fails the build. The CUDA
// runtime's declarations, shared with the stress tests, are checked in cuda_abi_check.cpp.
#include <nccl.h>

#include <climits>
#include <cstddef>
#include <type_traits>

#include "probes/nccl_api.h"
#include "tests/fakes/gpu/abi_shape.h"

namespace api = muster::nccl_api;

static_assert(api::kFloat32 == ncclFloat32);
static_assert(api::kSum == ncclSum);
static_assert(api::kNcclSuccess == ncclSuccess);
static_assert(api::kNcclInProgress == ncclInProgress);
static_assert(sizeof(api::ncclUniqueId) == sizeof(ncclUniqueId));
static_assert(sizeof(api::ncclResult_t) == sizeof(ncclResult_t));
static_assert(sizeof(api::ncclDataType_t) == sizeof(ncclDataType_t));
static_assert(sizeof(api::ncclRedOp_t) == sizeof(ncclRedOp_t));
static_assert(sizeof(api::ncclComm_t) == sizeof(ncclComm_t));

static_assert(same_shape(api::GetUniqueId{}, &ncclGetUniqueId));
static_assert(same_shape(api::CommInitRank{}, &ncclCommInitRank));
static_assert(same_shape(api::CommInitRankConfig{}, &ncclCommInitRankConfig));
// The config muster passes is the real struct's first fields, where the real one has them.
#define SAME_FIELD(field)                                                                  \
  static_assert(offsetof(api::ncclConfig_v21400, field) == offsetof(ncclConfig_t, field) && \
                sizeof(api::ncclConfig_v21400::field) == sizeof(ncclConfig_t::field))
SAME_FIELD(size);
SAME_FIELD(magic);
SAME_FIELD(version);
SAME_FIELD(blocking);
SAME_FIELD(cgaClusterSize);
SAME_FIELD(minCTAs);
SAME_FIELD(maxCTAs);
SAME_FIELD(netName);
#undef SAME_FIELD
static_assert(api::kNcclConfigUndefInt == NCCL_CONFIG_UNDEF_INT);
static_assert(ncclConfig_t(NCCL_CONFIG_INITIALIZER).magic == api::kNcclConfigMagic);
static_assert(api::kNcclConfigVersion == NCCL_VERSION(2, 14, 0));
static_assert(sizeof(api::ncclConfig_v21400) <= sizeof(ncclConfig_t));
static_assert(same_shape(api::CommAbort{}, &ncclCommAbort));
static_assert(same_shape(api::CommDestroy{}, &ncclCommDestroy));
static_assert(same_shape(api::CommGetAsyncError{}, &ncclCommGetAsyncError));
static_assert(same_shape(api::GetErrorString{}, &ncclGetErrorString));
static_assert(same_shape(api::AllReduce{}, &ncclAllReduce));
static_assert(same_shape(api::AllGather{}, &ncclAllGather));
static_assert(same_shape(api::ReduceScatter{}, &ncclReduceScatter));
static_assert(same_shape(api::Broadcast{}, &ncclBroadcast));
