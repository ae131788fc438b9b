# Installs apiary-agent for the current user (no administrator rights needed) and starts it at every logon.
#
#   powershell -ExecutionPolicy Bypass -File install.ps1 [-HiveHome DIR] [-SourceDir DIR]
#
# - The program: %LOCALAPPDATA%\Programs\Apiary\apiary-agent.exe (copied from -SourceDir, by default the
#   folder this script is in; the MSI installs it there itself and runs this script with -SourceDir
#   set to that folder).
# - The data: %LOCALAPPDATA%\Apiary (the agent's default data directory: outbox, tokens, device key,
#   agent.log), private to the user (the agent sets its DACL).
# - A Task Scheduler task, "Apiary Agent", started at logon of this user, that runs
#   `apiary-agent.exe run --hive-home DIR --log-file %LOCALAPPDATA%\Apiary\agent.log` without a window
#   (conhost.exe --headless, Windows 10 1809 and later), restarted if it fails. Started at once too.
#
# Sharing stays off until the user turns it on (the settings page, or `apiary-agent.exe sync enable`).
# Running the script again upgrades in place: the running agent is stopped in order first.
[CmdletBinding()]
param(
    [string]$HiveHome = (Join-Path $env:USERPROFILE '.hive'),
    [string]$SourceDir = $PSScriptRoot
)
$ErrorActionPreference = 'Stop'

$TaskName = 'Apiary Agent'
$ProgramDir = Join-Path $env:LOCALAPPDATA 'Programs\Apiary'
$DataDir = Join-Path $env:LOCALAPPDATA 'Apiary'
$Exe = Join-Path $ProgramDir 'apiary-agent.exe'
$Log = Join-Path $DataDir 'agent.log'

# An agent already running (an upgrade): stop it in order, so the outbox is closed cleanly.
if (Test-Path $Exe) {
    & $Exe stop --data-dir $DataDir | Out-Host
}
if (Get-ScheduledTask -TaskName $TaskName -ErrorAction SilentlyContinue) {
    Stop-ScheduledTask -TaskName $TaskName -ErrorAction SilentlyContinue
}

New-Item -ItemType Directory -Force -Path $ProgramDir | Out-Null
$Source = Join-Path $SourceDir 'apiary-agent.exe'
if ((Resolve-Path $Source).Path -ne (Join-Path (Resolve-Path $ProgramDir).Path 'apiary-agent.exe')) {
    Copy-Item -Force $Source $Exe
}
foreach ($script in 'uninstall.ps1', 'install.ps1') {
    $from = Join-Path $SourceDir $script
    if ((Test-Path $from) -and ((Resolve-Path $from).Path -ne (Join-Path (Resolve-Path $ProgramDir).Path $script))) {
        Copy-Item -Force $from (Join-Path $ProgramDir $script)
    }
}

$Arguments = "--headless `"$Exe`" run --data-dir `"$DataDir`" --hive-home `"$HiveHome`" --log-file `"$Log`""
$Action = New-ScheduledTaskAction -Execute 'conhost.exe' -Argument $Arguments -WorkingDirectory $ProgramDir
$User = [System.Security.Principal.WindowsIdentity]::GetCurrent().Name
$Trigger = New-ScheduledTaskTrigger -AtLogOn -User $User
$Principal = New-ScheduledTaskPrincipal -UserId $User -LogonType Interactive -RunLevel Limited
$Settings = New-ScheduledTaskSettingsSet -AllowStartIfOnBatteries -DontStopIfGoingOnBatteries `
    -ExecutionTimeLimit ([TimeSpan]::Zero) -RestartCount 3 -RestartInterval (New-TimeSpan -Minutes 1) `
    -MultipleInstances IgnoreNew
Register-ScheduledTask -TaskName $TaskName -Action $Action -Trigger $Trigger -Principal $Principal `
    -Settings $Settings -Description 'Apiary on-device agent (intake, outbox, sharing when turned on)' -Force | Out-Null
Start-ScheduledTask -TaskName $TaskName

Write-Host "Installed $Exe; it starts at logon (task `"$TaskName`") and is running now."
Write-Host "Data: $DataDir (log: $Log). Hive logs followed under $HiveHome."
Write-Host "Turn sharing on: `"$Exe`" sync enable --endpoint https://INGEST --token-file PATH-TO-TOKEN"
