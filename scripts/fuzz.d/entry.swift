// libFuzzer's entry points for Larder's fuzz targets (scripts/fuzz links this file with
// libFuzzer, which brings `main`). The target is named by LARDER_FUZZ_TARGET.

import Foundation
import LarderFuzzing

let selected: @Sendable ([UInt8]) -> Bool = {
    let name = ProcessInfo.processInfo.environment["LARDER_FUZZ_TARGET"] ?? ""
    guard let target = FuzzTargets.all[name] else {
        FileHandle.standardError.write(Data("LARDER_FUZZ_TARGET must be one of: \(FuzzTargets.names.joined(separator: " "))\n".utf8))
        exit(2)
    }
    return target
}()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    _ = selected(data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
    return 0
}
