// How the ABI checks (abi_check.cpp, cuda_abi_check.cpp) compare muster's own declaration of
// an entry point with the real header's: as many parameters, each of the size muster passes
// (its enums are ints, its handles pointers), and a result of the same size.
#pragma once

template <typename R1, typename... A1, typename R2, typename... A2>
constexpr bool same_shape(R1 (*)(A1...), R2 (*)(A2...)) {
  if constexpr (sizeof...(A1) != sizeof...(A2)) return false;
  else return sizeof(R1) == sizeof(R2) && ((sizeof(A1) == sizeof(A2)) && ...);
}
