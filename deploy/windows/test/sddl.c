/* sddl.exe FILE: prints FILE's owner and DACL as an SDDL string (O:...D:...), for the Windows tests'
 * checks of the agent's private files. Test-only; never shipped. */
#include <windows.h>
#include <sddl.h>
#include <stdio.h>

int wmain(int argc, wchar_t **argv)
{
    DWORD need = 0;
    SECURITY_INFORMATION what = OWNER_SECURITY_INFORMATION | DACL_SECURITY_INFORMATION;
    PSECURITY_DESCRIPTOR sd;
    LPWSTR text = NULL;

    if (argc != 2) {
        fwprintf(stderr, L"usage: sddl.exe FILE\n");
        return 2;
    }
    GetFileSecurityW(argv[1], what, NULL, 0, &need);
    if (need == 0) {
        fwprintf(stderr, L"GetFileSecurityW(%ls): error %lu\n", argv[1], GetLastError());
        return 1;
    }
    sd = HeapAlloc(GetProcessHeap(), 0, need);
    if (!sd || !GetFileSecurityW(argv[1], what, sd, need, &need)) {
        fwprintf(stderr, L"GetFileSecurityW(%ls): error %lu\n", argv[1], GetLastError());
        return 1;
    }
    if (!ConvertSecurityDescriptorToStringSecurityDescriptorW(sd, SDDL_REVISION_1, what, &text, NULL)) {
        fwprintf(stderr, L"ConvertSecurityDescriptorToStringSecurityDescriptorW: error %lu\n", GetLastError());
        return 1;
    }
    wprintf(L"%ls\n", text);
    LocalFree(text);
    return 0;
}
