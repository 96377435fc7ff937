#include "ingest/chrome/json_container_scan.h"

#include <cstddef>
#include <cstdint>
#if defined(__AVX2__) && defined(__PCLMUL__)
#include <immintrin.h>
#endif

namespace bubblewatch {

const char* ScanJsonContainerBytewise(const char* p, const char* const end,
                                      JsonScanState& s) {
  for (; p < end; ++p) {
    const char c = *p;
    if (s.in_string) {
      if (s.escape_pending) {
        s.escape_pending = false;
      } else if (c == '\\') {
        s.escape_pending = true;
      } else if (c == '"') {
        s.in_string = false;
      }
    } else if (c == '"') {
      s.in_string = true;
    } else if (c == '{' || c == '[') {
      ++s.depth;
    } else if ((c == '}' || c == ']') && --s.depth == 0) {
      return p + 1;
    }
  }
  return nullptr;
}

#if defined(__AVX2__) && defined(__PCLMUL__)
namespace {

// Bit i set when byte i of the 64 at `lo`/`hi` matched.
inline uint64_t Mask64(__m256i lo_match, __m256i hi_match) {
  return static_cast<uint32_t>(_mm256_movemask_epi8(lo_match)) |
         (static_cast<uint64_t>(
              static_cast<uint32_t>(_mm256_movemask_epi8(hi_match)))
          << 32);
}

// Bit i = XOR of bits 0..i: with the unescaped quotes as input, the bytes
// from an opening quote up to (not including) its closing quote.
inline uint64_t PrefixXor(uint64_t bits) {
  const __m128i ones = _mm_set1_epi8(static_cast<char>(0xFF));
  return static_cast<uint64_t>(_mm_cvtsi128_si64(_mm_clmulepi64_si128(
      _mm_set_epi64x(0, static_cast<int64_t>(bits)), ones, 0)));
}

}  // namespace

const char* ScanJsonContainer(const char* p, const char* const end,
                              JsonScanState& s) {
  const __m256i quote = _mm256_set1_epi8('"');
  const __m256i backslash = _mm256_set1_epi8('\\');
  // '[' | 0x20 == '{' and ']' | 0x20 == '}'; no other byte maps onto them.
  const __m256i case_bit = _mm256_set1_epi8(0x20);
  const __m256i open = _mm256_set1_epi8('{');
  const __m256i close = _mm256_set1_epi8('}');
  while (p < end) {
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i hi =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
    const size_t avail = static_cast<size_t>(end - p);
    const size_t width = avail < 64 ? avail : 64;
    const uint64_t valid =
        width == 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1;
    uint64_t quotes =
        Mask64(_mm256_cmpeq_epi8(lo, quote), _mm256_cmpeq_epi8(hi, quote)) &
        valid;
    const uint64_t all_backslashes = Mask64(_mm256_cmpeq_epi8(lo, backslash),
                                            _mm256_cmpeq_epi8(hi, backslash)) &
                                     valid;
    uint64_t backslashes = all_backslashes;
    const __m256i lo_folded = _mm256_or_si256(lo, case_bit);
    const __m256i hi_folded = _mm256_or_si256(hi, case_bit);
    const uint64_t opens = Mask64(_mm256_cmpeq_epi8(lo_folded, open),
                                  _mm256_cmpeq_epi8(hi_folded, open)) &
                           valid;
    const uint64_t closes = Mask64(_mm256_cmpeq_epi8(lo_folded, close),
                                   _mm256_cmpeq_epi8(hi_folded, close)) &
                            valid;
    // Escaped bytes. Backslashes are rare in traces, so each is walked on
    // its own: it escapes the byte after it, which escapes nothing itself.
    uint64_t escaped = 0;
    bool escape_after = false;  // The byte after this stretch's 64.
    if (s.escape_pending) {
      escaped = 1;
      backslashes &= ~uint64_t{1};
    }
    while (backslashes != 0) {
      const int i = __builtin_ctzll(backslashes);
      backslashes &= backslashes - 1;
      if (i == 63) {
        escape_after = true;
      } else {
        escaped |= uint64_t{1} << (i + 1);
        backslashes &= ~(uint64_t{1} << (i + 1));
      }
    }
    const bool escape_pending_next =
        width == 64 ? escape_after : ((escaped >> width) & 1) != 0;
    quotes &= ~escaped;
    // Brackets and quotes are distinct bytes, so a bracket's bit in the
    // in-string mask says whether it stands inside a string.
    const uint64_t in_string =
        PrefixXor(quotes) ^ (s.in_string ? ~uint64_t{0} : 0);
    // The masks took every backslash for an escape. Only those in strings
    // are (JSON has no others; a broken file may): if one stands outside,
    // this step goes byte by byte. The first backslash outside is found
    // exactly, since only backslashes before it, all inside, decided the
    // string state up to it.
    if ((all_backslashes & ~in_string) != 0) {
      const char* after = ScanJsonContainerBytewise(p, p + width, s);
      if (after != nullptr) return after;
      p += width;
      continue;
    }
    uint64_t brackets = (opens | closes) & ~in_string & ~escaped;
    while (brackets != 0) {
      const int i = __builtin_ctzll(brackets);
      brackets &= brackets - 1;
      if ((opens >> i) & 1) {
        ++s.depth;
      } else if (--s.depth == 0) {
        return p + i + 1;
      }
    }
    s.in_string = ((in_string >> (width - 1)) & 1) != 0;
    s.escape_pending = escape_pending_next;
    p += width;
  }
  return nullptr;
}
#else
const char* ScanJsonContainer(const char* p, const char* const end,
                              JsonScanState& s) {
  return ScanJsonContainerBytewise(p, end, s);
}
#endif

}  // namespace bubblewatch
