// The larder executable started through another tool (a shell that ignores a signal first,
// setpriv that drops root), for tests of what the process meets rather than what it is told.

import Foundation
import XCTest

extension IntegrationTestCase {
    /// Runs `tool` with `toolArguments`, then the executable's path, then `arguments` (the tool
    /// execs the executable, so the process is Larder's own). Returns it and its stderr.
    public func launch(_ arguments: [String], through tool: String, _ toolArguments: [String]) throws -> (Process, Pipe) {
        guard FileManager.default.isExecutableFile(atPath: binary.path) else {
            throw skipOrFail("the larder executable is not built next to the tests (run scripts/test, or set LARDER_BINARY)")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = toolArguments + [binary.path] + arguments
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        return (process, errors)
    }
}
