// The PMIx statuses muster answers with where it, not the PMIx library, decides a fence's or
// fetch's fate: named by OpenPMIx's own header, never copied as numbers (a copied -32 was
// once commented as PMIX_ERR_OUT_OF_RESOURCE, which is -29).
#pragma once

#include <pmix_common.h>

namespace muster {

constexpr int kPmixErrNotFound = PMIX_ERR_NOT_FOUND;  // no rank published the key
constexpr int kPmixErrUnreach = PMIX_ERR_UNREACH;     // the node holding the rank is gone
constexpr int kPmixErrNoMem = PMIX_ERR_NOMEM;         // the data is beyond what a frame may carry

}  // namespace muster
