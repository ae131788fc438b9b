//! The Windows calls: protected DACLs, the token file rule, file identity, console control and the
//! stop event. Every `unsafe` block of the agent is here, each a plain Win32 call whose buffers and
//! handles this module owns.
#![allow(unsafe_code)]

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::windows::ffi::{OsStrExt, OsStringExt};
use std::os::windows::io::AsRawHandle;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;
use windows_sys::Win32::Foundation::{
    CloseHandle, GetLastError, LocalFree, ERROR_ALREADY_EXISTS, ERROR_FILE_NOT_FOUND, HANDLE,
    WAIT_ABANDONED, WAIT_OBJECT_0, WAIT_TIMEOUT,
};
use windows_sys::Win32::Security::Authorization::{
    ConvertSecurityDescriptorToStringSecurityDescriptorW, ConvertSidToStringSidW,
    ConvertStringSecurityDescriptorToSecurityDescriptorW, SDDL_REVISION_1,
};
use windows_sys::Win32::Security::{
    GetFileSecurityW, GetTokenInformation, SetFileSecurityW, TokenUser, DACL_SECURITY_INFORMATION,
    OWNER_SECURITY_INFORMATION, PROTECTED_DACL_SECURITY_INFORMATION, PSECURITY_DESCRIPTOR,
    TOKEN_QUERY, TOKEN_USER,
};
use windows_sys::Win32::Storage::FileSystem::{
    GetFileInformationByHandle, BY_HANDLE_FILE_INFORMATION,
};
use windows_sys::Win32::System::Console::{
    SetConsoleCtrlHandler, CTRL_CLOSE_EVENT, CTRL_LOGOFF_EVENT, CTRL_SHUTDOWN_EVENT,
};
use windows_sys::Win32::System::Threading::{
    CreateEventW, CreateMutexW, GetCurrentProcess, OpenEventW, OpenMutexW, OpenProcessToken,
    ReleaseMutex, SetEvent, WaitForSingleObject, EVENT_MODIFY_STATE, INFINITE,
    SYNCHRONIZATION_SYNCHRONIZE,
};

fn wide(s: &OsStr) -> Vec<u16> {
    s.encode_wide().chain(std::iter::once(0)).collect()
}

/// A NUL-terminated UTF-16 string Windows allocated with `LocalAlloc`, read and freed.
///
/// # Safety
/// `p` is null or a NUL-terminated string from `LocalAlloc`, owned by the caller.
unsafe fn take_local_string(p: *mut u16) -> String {
    if p.is_null() {
        return String::new();
    }
    let mut len = 0;
    while *p.add(len) != 0 {
        len += 1;
    }
    let s = OsString::from_wide(std::slice::from_raw_parts(p, len))
        .to_string_lossy()
        .into_owned();
    LocalFree(p.cast());
    s
}

/// A kernel handle closed when dropped.
struct OwnedHandle(HANDLE);

impl Drop for OwnedHandle {
    fn drop(&mut self) {
        // SAFETY: the handle was returned by a successful Create/Open call and is closed once.
        unsafe { CloseHandle(self.0) };
    }
}

// SAFETY: kernel handles may be used and closed from any thread.
unsafe impl Send for OwnedHandle {}
unsafe impl Sync for OwnedHandle {}

/// The SID of the user this process runs as, in string form (`S-1-5-21-…`).
pub fn current_user_sid() -> io::Result<String> {
    // SAFETY: every out-pointer points into a buffer of the stated size that outlives the call; the
    // token handle is closed by `OwnedHandle`; the SID string is freed by `take_local_string`.
    unsafe {
        let mut token: HANDLE = std::ptr::null_mut();
        if OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &mut token) == 0 {
            return Err(io::Error::last_os_error());
        }
        let token = OwnedHandle(token);
        let mut need = 0u32;
        GetTokenInformation(token.0, TokenUser, std::ptr::null_mut(), 0, &mut need);
        // u64 words: TOKEN_USER holds pointers.
        let mut buf = vec![0u64; (need as usize).div_ceil(8).max(1)];
        if GetTokenInformation(token.0, TokenUser, buf.as_mut_ptr().cast(), need, &mut need) == 0 {
            return Err(io::Error::last_os_error());
        }
        let user = &*(buf.as_ptr() as *const TOKEN_USER);
        let mut text: *mut u16 = std::ptr::null_mut();
        if ConvertSidToStringSidW(user.User.Sid, &mut text) == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(take_local_string(text))
    }
}

/// Gives `path` (a file or a directory) a protected DACL with a single ACE: full control for the user
/// this process runs as; nothing inherited from the parent, so no other user, group, SYSTEM or
/// Administrators entry applies. A directory's ACE is inherited by what is created in it.
pub fn make_private(path: &Path) -> io::Result<()> {
    let sid = current_user_sid()?;
    let inherit = if path.is_dir() { "OICI" } else { "" };
    let sddl = format!("D:P(A;{inherit};FA;;;{sid})");
    let what = DACL_SECURITY_INFORMATION | PROTECTED_DACL_SECURITY_INFORMATION;
    // SAFETY: both strings are NUL-terminated and outlive the calls; the descriptor Windows allocates
    // is freed with LocalFree once set.
    let ok = unsafe {
        let mut sd: PSECURITY_DESCRIPTOR = std::ptr::null_mut();
        if ConvertStringSecurityDescriptorToSecurityDescriptorW(
            wide(OsStr::new(&sddl)).as_ptr(),
            SDDL_REVISION_1,
            &mut sd,
            std::ptr::null_mut(),
        ) == 0
        {
            return Err(io::Error::last_os_error());
        }
        let ok = SetFileSecurityW(wide(path.as_os_str()).as_ptr(), what, sd);
        let err = io::Error::last_os_error();
        LocalFree(sd);
        if ok == 0 {
            Err(err)
        } else {
            Ok(())
        }
    };
    ok.map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot make {} private to this user: {e}", path.display()),
        )
    })
}

/// The owner and DACL of `path` as SDDL (`O:<sid>D:<flags>(ace)(ace)…`).
pub fn security_sddl(path: &Path) -> io::Result<String> {
    let what = OWNER_SECURITY_INFORMATION | DACL_SECURITY_INFORMATION;
    let name = wide(path.as_os_str());
    // SAFETY: the descriptor buffer is `need` bytes (u64 words, aligned for the structure) and outlives
    // both calls; the SDDL string is freed by `take_local_string`.
    unsafe {
        let mut need = 0u32;
        GetFileSecurityW(name.as_ptr(), what, std::ptr::null_mut(), 0, &mut need);
        if need == 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = vec![0u64; (need as usize).div_ceil(8)];
        if GetFileSecurityW(
            name.as_ptr(),
            what,
            buf.as_mut_ptr().cast(),
            need,
            &mut need,
        ) == 0
        {
            return Err(io::Error::last_os_error());
        }
        let mut text: *mut u16 = std::ptr::null_mut();
        if ConvertSecurityDescriptorToStringSecurityDescriptorW(
            buf.as_mut_ptr().cast(),
            SDDL_REVISION_1,
            what,
            &mut text,
            std::ptr::null_mut(),
        ) == 0
        {
            return Err(io::Error::last_os_error());
        }
        Ok(take_local_string(text))
    }
}

/// Why a token file's DACL is refused (see [`check_private_file`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotPrivate {
    /// Owned by another account (its SID).
    Owner(String),
    /// Others may open it: the SIDs (or SDDL aliases, `WD` is Everyone, `BU` Users) it grants to.
    Open(Vec<String>),
}

/// The Windows rule for a secret file handed in (a token file): owned by the user the agent runs as,
/// and its DACL allows nobody but that user, SYSTEM (`SY`) and the Administrators group (`BA`), who
/// can read every file of the machine anyway. A missing (null) DACL allows everyone and is refused.
pub fn check_private_file(path: &Path) -> io::Result<Result<(), NotPrivate>> {
    let sddl = security_sddl(path)?;
    let me = current_user_sid()?;
    Ok(judge_sddl(&sddl, &me))
}

fn judge_sddl(sddl: &str, me: &str) -> Result<(), NotPrivate> {
    let owner = sddl
        .strip_prefix("O:")
        .map(|rest| rest.split("D:").next().unwrap_or(rest))
        .unwrap_or("");
    // Created elevated, a file is owned by Administrators: still not another user's.
    if owner != me && owner != "BA" {
        return Err(NotPrivate::Owner(owner.to_string()));
    }
    let Some((_, dacl)) = sddl.split_once("D:") else {
        return Err(NotPrivate::Open(vec!["WD".into()]));
    };
    if dacl.starts_with("NO_ACCESS_CONTROL") {
        return Err(NotPrivate::Open(vec!["WD".into()]));
    }
    let mut open = Vec::new();
    for ace in dacl.split('(').skip(1) {
        let fields: Vec<&str> = ace.trim_end_matches(')').split(';').collect();
        let [kind, flags, _rights, _, _, trustee, ..] = fields.as_slice() else {
            continue;
        };
        // Only allow entries that apply to the file itself (not inherit-only) matter.
        if !kind.starts_with('A') || flags.contains("IO") {
            continue;
        }
        if ![me, "SY", "BA", "OW"].contains(trustee) && *trustee != owner {
            open.push(trustee.to_string());
        }
    }
    if open.is_empty() {
        Ok(())
    } else {
        Err(NotPrivate::Open(open))
    }
}

/// The trustees of [`NotPrivate::Open`] in words (`Everyone, Users, S-1-5-21-…`).
pub fn describe_sids(sids: &[String]) -> String {
    let name = |s: &str| match s {
        "WD" => "Everyone".to_string(),
        "BU" => "Users".to_string(),
        "AU" => "Authenticated Users".to_string(),
        "BG" => "Guests".to_string(),
        "IU" => "Interactive users".to_string(),
        other => other.to_string(),
    };
    sids.iter().map(|s| name(s)).collect::<Vec<_>>().join(", ")
}

/// `\\?\C:\x` (the form `std::fs::canonicalize` returns) as the `C:\x` a user types and reads, and
/// `\\?\UNC\server\share\x` as `\\server\share\x`; any other path as it is.
pub fn plain_path(path: PathBuf) -> PathBuf {
    let plain = {
        let text = path.to_string_lossy();
        if let Some(rest) = text.strip_prefix(r"\\?\UNC\") {
            Some(PathBuf::from(format!(r"\\{rest}")))
        } else {
            match text.strip_prefix(r"\\?\") {
                Some(rest) if rest.as_bytes().get(1) == Some(&b':') => Some(PathBuf::from(rest)),
                _ => None,
            }
        }
    };
    plain.unwrap_or(path)
}

/// A file's identity: volume serial number and file index, from the open handle.
pub fn file_id(file: &File) -> io::Result<String> {
    // SAFETY: the handle is the open file's, the structure is written by the call.
    let info = unsafe {
        let mut info: BY_HANDLE_FILE_INFORMATION = std::mem::zeroed();
        if GetFileInformationByHandle(file.as_raw_handle() as HANDLE, &mut info) == 0 {
            return Err(io::Error::last_os_error());
        }
        info
    };
    let index = (u64::from(info.nFileIndexHigh) << 32) | u64::from(info.nFileIndexLow);
    Ok(format!("{:08x}:{index}", info.dwVolumeSerialNumber))
}

/// What the console control handler and the stop thread share.
struct Shutdown {
    token: CancellationToken,
    /// Set once `run` has finished its ordered shutdown.
    finished: Mutex<bool>,
    done: Condvar,
}

static SHUTDOWN: OnceLock<Shutdown> = OnceLock::new();

/// How long the console handler holds a closing console (or a logoff) open for the ordered shutdown;
/// Windows ends the process about 5 seconds after a close event whatever the handler does.
const CLOSE_GRACE: Duration = Duration::from_millis(4500);

unsafe extern "system" fn on_console_event(kind: u32) -> windows_sys::core::BOOL {
    let Some(s) = SHUTDOWN.get() else {
        return 0;
    };
    s.token.cancel();
    if matches!(
        kind,
        CTRL_CLOSE_EVENT | CTRL_LOGOFF_EVENT | CTRL_SHUTDOWN_EVENT
    ) {
        // Returning lets Windows end the process: wait for the outbox to close first.
        if let Ok(finished) = s.finished.lock() {
            drop(s.done.wait_timeout_while(finished, CLOSE_GRACE, |f| !*f));
        }
    }
    1
}

/// Cancels `token` on Ctrl-C, Ctrl-Break, console close, logoff and system shutdown (a console
/// control handler); for the last three the handler waits (up to ~4.5 s) for [`shutdown_finished`].
pub fn shutdown_requested(token: CancellationToken) -> io::Result<()> {
    let _ = SHUTDOWN.set(Shutdown {
        token,
        finished: Mutex::new(false),
        done: Condvar::new(),
    });
    // SAFETY: the handler is a plain function that only touches the static above.
    if unsafe { SetConsoleCtrlHandler(Some(on_console_event), 1) } == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Tells a waiting console handler (and a waiting `apiary-agent stop`) that the ordered shutdown is
/// complete.
pub fn shutdown_finished() {
    if let Some(s) = SHUTDOWN.get() {
        if let Ok(mut f) = s.finished.lock() {
            *f = true;
        }
        s.done.notify_all();
    }
}

/// The names of the stop event and the running mutex of the agent on `data_dir` (per logon session:
/// `Local\`; one pair per data directory, the path compared case-insensitively).
fn object_names(data_dir: &Path) -> (String, String) {
    let full = std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let key = full.to_string_lossy().trim_end_matches('\\').to_lowercase();
    let h = hex::encode(&Sha256::digest(key.as_bytes())[..8]);
    (
        format!("Local\\apiary-agent-stop-{h}"),
        format!("Local\\apiary-agent-running-{h}"),
    )
}

/// Listens for `apiary-agent stop` on `data_dir`: creates the named stop event and holds the named
/// running mutex until [`shutdown_finished`]. Fails when another agent already runs on `data_dir`.
pub fn stop_event(data_dir: &Path, token: CancellationToken) -> anyhow::Result<()> {
    let (event_name, mutex_name) = object_names(data_dir);
    let (tx, rx) = std::sync::mpsc::channel::<anyhow::Result<()>>();
    let data_dir = data_dir.to_path_buf();
    std::thread::Builder::new()
        .name("stop-event".into())
        .spawn(move || {
            // SAFETY: the names are NUL-terminated and outlive the calls; handles are owned below.
            let (mutex, event) = unsafe {
                let mutex = CreateMutexW(std::ptr::null(), 1, wide(OsStr::new(&mutex_name)).as_ptr());
                let already = GetLastError() == ERROR_ALREADY_EXISTS;
                if mutex.is_null() {
                    let _ = tx.send(Err(io::Error::last_os_error().into()));
                    return;
                }
                let mutex = OwnedHandle(mutex);
                if already {
                    let _ = tx.send(Err(anyhow::anyhow!(
                        "another apiary-agent is already running on {} (stop it with `apiary-agent stop --data-dir {}`)",
                        data_dir.display(),
                        data_dir.display()
                    )));
                    return;
                }
                let event = CreateEventW(std::ptr::null(), 1, 0, wide(OsStr::new(&event_name)).as_ptr());
                if event.is_null() {
                    let _ = tx.send(Err(io::Error::last_os_error().into()));
                    return;
                }
                (mutex, OwnedHandle(event))
            };
            let _ = tx.send(Ok(()));
            // SAFETY: the event handle is open for the whole wait.
            unsafe { WaitForSingleObject(event.0, INFINITE) };
            token.cancel();
            if let Some(s) = SHUTDOWN.get() {
                if let Ok(f) = s.finished.lock() {
                    drop(s.done.wait_while(f, |f| !*f));
                }
            }
            // SAFETY: this thread owns the mutex (created with initial ownership above).
            unsafe { ReleaseMutex(mutex.0) };
        })?;
    rx.recv()
        .map_err(|_| anyhow::anyhow!("the stop-event thread ended early"))?
}

/// What `apiary-agent stop` found.
pub enum StopOutcome {
    Stopped,
    NotRunning,
    StillRunning,
}

/// Asks the agent on `data_dir` to stop (its stop event) and waits up to `wait` for it to finish.
pub fn signal_stop(data_dir: &Path, wait: Duration) -> io::Result<StopOutcome> {
    let (event_name, mutex_name) = object_names(data_dir);
    // SAFETY: names are NUL-terminated and outlive the calls; handles are owned by `OwnedHandle`.
    unsafe {
        let mutex = OpenMutexW(
            SYNCHRONIZATION_SYNCHRONIZE,
            0,
            wide(OsStr::new(&mutex_name)).as_ptr(),
        );
        if mutex.is_null() {
            return match GetLastError() {
                ERROR_FILE_NOT_FOUND => Ok(StopOutcome::NotRunning),
                _ => Err(io::Error::last_os_error()),
            };
        }
        let mutex = OwnedHandle(mutex);
        let event = OpenEventW(
            EVENT_MODIFY_STATE,
            0,
            wide(OsStr::new(&event_name)).as_ptr(),
        );
        if event.is_null() {
            return Err(io::Error::last_os_error());
        }
        let event = OwnedHandle(event);
        if SetEvent(event.0) == 0 {
            return Err(io::Error::last_os_error());
        }
        let ms = u32::try_from(wait.as_millis()).unwrap_or(u32::MAX - 1);
        match WaitForSingleObject(mutex.0, ms) {
            WAIT_OBJECT_0 | WAIT_ABANDONED => {
                ReleaseMutex(mutex.0);
                Ok(StopOutcome::Stopped)
            }
            WAIT_TIMEOUT => Ok(StopOutcome::StillRunning),
            _ => Err(io::Error::last_os_error()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: &str = "S-1-5-21-1-2-3-1001";

    #[test]
    fn verbatim_paths_are_shown_as_users_type_them() {
        assert_eq!(
            plain_path(PathBuf::from(r"\\?\C:\Users\ann\t")),
            PathBuf::from(r"C:\Users\ann\t")
        );
        assert_eq!(
            plain_path(PathBuf::from(r"\\?\UNC\srv\share\t")),
            PathBuf::from(r"\\srv\share\t")
        );
        assert_eq!(
            plain_path(PathBuf::from(r"Z:\tmp\t")),
            PathBuf::from(r"Z:\tmp\t")
        );
    }

    #[test]
    fn a_dacl_of_this_user_system_and_administrators_is_private() {
        let ok = format!("O:{ME}D:P(A;;FA;;;{ME})(A;;FA;;;SY)(A;;FA;;;BA)");
        assert_eq!(judge_sddl(&ok, ME), Ok(()));
        let everyone = format!("O:{ME}D:(A;;FA;;;{ME})(A;;0x1200a9;;;WD)");
        assert_eq!(
            judge_sddl(&everyone, ME),
            Err(NotPrivate::Open(vec!["WD".into()]))
        );
        let other = "O:S-1-5-21-9-9-9-500D:(A;;FA;;;S-1-5-21-9-9-9-500)";
        assert!(matches!(judge_sddl(other, ME), Err(NotPrivate::Owner(_))));
        assert_eq!(
            judge_sddl(&format!("O:{ME}D:NO_ACCESS_CONTROL"), ME),
            Err(NotPrivate::Open(vec!["WD".into()]))
        );
    }
}
