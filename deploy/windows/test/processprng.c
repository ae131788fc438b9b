/* bcryptprimitives.dll for the Windows tests under Wine 8, which lacks ProcessPrng (what Rust's std
 * asks for its random numbers since Rust 1.78): ProcessPrng forwarded to RtlGenRandom
 * (SystemFunction036 of advapi32). Placed beside apiary-agent.exe by `scripts/windows.sh test` only;
 * never shipped (Windows 10 and later have ProcessPrng). */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    while (len > 0) {
        ULONG chunk = len > 0x40000000 ? 0x40000000 : (ULONG)len;
        if (!SystemFunction036(data, chunk))
            return FALSE;
        data += chunk;
        len -= chunk;
    }
    return TRUE;
}
