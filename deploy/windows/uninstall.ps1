# Removes apiary-agent for the current user: stops it in order, removes the logon task and the program.
#
#   powershell -ExecutionPolicy Bypass -File uninstall.ps1 [-RemoveData]
#
# -KeepProgram leaves the program's files alone (the MSI's removal runs this script and then removes its
# own files).
# The data directory (%LOCALAPPDATA%\Apiary: events not yet shared, tokens, the device key, agent.log)
# is kept unless -RemoveData is given.
[CmdletBinding()]
param([switch]$RemoveData, [switch]$KeepProgram)
$ErrorActionPreference = 'Stop'

$TaskName = 'Apiary Agent'
$ProgramDir = Join-Path $env:LOCALAPPDATA 'Programs\Apiary'
$DataDir = Join-Path $env:LOCALAPPDATA 'Apiary'
$Exe = Join-Path $ProgramDir 'apiary-agent.exe'

if (Test-Path $Exe) {
    & $Exe stop --data-dir $DataDir | Out-Host
}
if (Get-ScheduledTask -TaskName $TaskName -ErrorAction SilentlyContinue) {
    Stop-ScheduledTask -TaskName $TaskName -ErrorAction SilentlyContinue
    Unregister-ScheduledTask -TaskName $TaskName -Confirm:$false
}
if (-not $KeepProgram -and (Test-Path $ProgramDir)) {
    Remove-Item -Recurse -Force $ProgramDir
}
if ($RemoveData -and (Test-Path $DataDir)) {
    Remove-Item -Recurse -Force $DataDir
    Write-Host "Removed $DataDir"
} elseif (Test-Path $DataDir) {
    Write-Host "Kept the data directory $DataDir (remove it with -RemoveData)"
}
Write-Host 'apiary-agent uninstalled.'
