// A SQLite VFS for the reader connections: the default ("unix") VFS for everything, except that a
// database file's pages are read through one memory map that lives as long as a reader has the
// file open.
//
// Why not SQLite's own `mmap_size`: in WAL mode SQLite unmaps the whole file at the start of every
// read transaction that follows a commit (`pagerBeginReadTransaction` → `sqlite3OsUnfetch(fd, 0,
// 0)`), in case another process truncated and regrew the file, so a reader maps, faults and
// unmaps the file again after every group commit; under writes a purge's readers' slow seconds
// are 5× those with read calls (docs/performance.md, "Reads through a memory map"). Here the map is made
// once and those unmaps are ignored. That is safe because only this process writes the file
// (DatabaseLock) and WAL mode never moves a page a reader's snapshot needs: a checkpoint copies
// a page into the file only when no reader's snapshot predates that version of it, and shrinks
// the file only when no reader's snapshot is older than the WAL's end, so a reader never asks
// for a page past the end of the file nor finds one rewritten under it. The file's size is
// looked at again (fstat) for a page past the size last seen, and forgotten at the first read
// transaction after a commit; a page is given only with 256 bytes of the file after it, as
// SQLite's own unixFetch does, so that a damaged page read past its end reads the file. (A
// checkpoint that shrinks the file within a reader's transaction leaves the size seen too large
// until the next commit, as SQLite's own map does: the pages a snapshot asks for are still
// inside the file, only the last one's 256 bytes are not.) SQLite reads with `xRead` whatever
// `xFetch` does not give (the file's last page, a map that failed).
// The map is made from SQLite's own descriptor, never a second one, and shared by the file's
// readers (SharedMaps).

import CSQLite
import LarderSync

#if canImport(Glibc)
    import Glibc
#endif

enum MappedReads {
    /// The VFS's name, to open a connection with (`SQLiteConnection(path:vfs:)`).
    static let vfsName = "larder-mapped-reads"

    /// Registers the VFS once; false when SQLite has no default VFS to wrap.
    static let registered: Bool = {
        guard let base = sqlite3_vfs_find(nil) else { return false }
        let vfs = UnsafeMutablePointer<sqlite3_vfs>.allocate(capacity: 1)
        vfs.initialize(to: base.pointee)
        vfs.pointee.szOsFile = Int32(FileHeader.size) + base.pointee.szOsFile
        vfs.pointee.zName = UnsafePointer(strdup(vfsName))
        vfs.pointee.pAppData = UnsafeMutableRawPointer(base)
        vfs.pointee.pNext = nil
        vfs.pointee.xOpen = openFile
        return sqlite3_vfs_register(vfs, 0) == SQLITE_OK
    }()
}

/// What this VFS keeps in front of the default VFS's own file object (which follows it):
/// the `sqlite3_file` header SQLite sees, then the map. Raw offsets, for a C layout.
private enum FileHeader {
    // 0: sqlite3_file.pMethods, the only field SQLite reads.
    static let map = 8 // base address of the map, or nil before the first fetch
    static let mapBytes = 16 // bytes reserved for the map (SQLITE_FCNTL_MMAP_SIZE)
    static let fileBytes = 24 // the file's size when last looked at
    static let path = 32 // the file's name (SQLite keeps it valid until xClose)
    static let isMainDatabase = 40
    static let device = 48 // the file's device and inode, once mapped (SharedMaps)
    static let inode = 56
    static let size = 64

    static func wrapped(_ file: UnsafeMutablePointer<sqlite3_file>?) -> UnsafeMutablePointer<sqlite3_file> {
        (UnsafeMutableRawPointer(file!) + size).assumingMemoryBound(to: sqlite3_file.self)
    }
    static func int(_ file: UnsafeMutablePointer<sqlite3_file>?, _ offset: Int) -> Int {
        UnsafeMutableRawPointer(file!).load(fromByteOffset: offset, as: Int.self)
    }
    static func setInt(_ file: UnsafeMutablePointer<sqlite3_file>?, _ offset: Int, _ value: Int) {
        UnsafeMutableRawPointer(file!).storeBytes(of: value, toByteOffset: offset, as: Int.self)
    }
}

/// One map per file (by device and inode), shared by all its readers: the pages are faulted in
/// once, not once per reader, and RSS counts them once. Unmapped when its last reader closes.
private enum SharedMaps {
    private struct Identity: Hashable { let device: Int, inode: Int }
    private struct Map: Sendable { let address: Int, bytes: Int, users: Int }
    private static let maps = Locked<[Identity: Map]>([:])

    /// The file's map, made with `bytes` when it has none; nil when it cannot be made. Made from
    /// the default VFS's own descriptor: opening another one and closing it would let go of every
    /// POSIX lock this process holds on the file (SQLite's SHARED lock among them). The
    /// descriptor is read from the unix VFS's file object (its fourth field, after three
    /// pointers) and used only when it is open on this very file.
    static func take(
        _ file: UnsafeMutablePointer<sqlite3_file>?, wrapped: UnsafeMutablePointer<sqlite3_file>, bytes: Int
    ) -> (address: UnsafeMutableRawPointer, bytes: Int)? {
        guard let path = UnsafePointer<CChar>(bitPattern: FileHeader.int(file, FileHeader.path)) else { return nil }
        let descriptor = UnsafeMutableRawPointer(wrapped).load(fromByteOffset: 3 * MemoryLayout<UnsafeRawPointer>.size, as: Int32.self)
        var opened = stat()
        var named = stat()
        guard descriptor >= 0, fstat(descriptor, &opened) == 0, stat(path, &named) == 0, opened.st_dev == named.st_dev,
            opened.st_ino == named.st_ino
        else { return nil }
        let identity = Identity(device: Int(opened.st_dev), inode: Int(opened.st_ino))
        let taken: Map? = maps.withLock { maps in
            if let map = maps[identity] {
                maps[identity] = Map(address: map.address, bytes: map.bytes, users: map.users + 1)
                return map
            }
            // The whole reservation at once: pages past the file's end are never given out.
            let mapped = mmap(nil, bytes, PROT_READ, MAP_SHARED, descriptor, 0)
            guard let mapped, mapped != MAP_FAILED else { return nil }
            let map = Map(address: Int(bitPattern: mapped), bytes: bytes, users: 1)
            maps[identity] = map
            return map
        }
        guard let taken, let address = UnsafeMutableRawPointer(bitPattern: taken.address) else { return nil }
        FileHeader.setInt(file, FileHeader.device, identity.device)
        FileHeader.setInt(file, FileHeader.inode, identity.inode)
        return (address, taken.bytes)
    }

    /// Lets go of the map `file` took; the last reader's unmaps it.
    static func release(_ file: UnsafeMutablePointer<sqlite3_file>?) {
        let identity = Identity(device: FileHeader.int(file, FileHeader.device), inode: FileHeader.int(file, FileHeader.inode))
        maps.withLock { maps in
            guard let map = maps[identity] else { return }
            guard map.users == 1 else {
                maps[identity] = Map(address: map.address, bytes: map.bytes, users: map.users - 1)
                return
            }
            munmap(UnsafeMutableRawPointer(bitPattern: map.address), map.bytes)
            maps[identity] = nil
        }
    }
}

private func baseVFS(_ vfs: UnsafeMutablePointer<sqlite3_vfs>?) -> UnsafeMutablePointer<sqlite3_vfs> {
    vfs!.pointee.pAppData.assumingMemoryBound(to: sqlite3_vfs.self)
}

private let openFile:
    @convention(c) (
        UnsafeMutablePointer<sqlite3_vfs>?, UnsafePointer<CChar>?, UnsafeMutablePointer<sqlite3_file>?, Int32,
        UnsafeMutablePointer<Int32>?
    ) -> Int32 = { vfs, name, file, flags, outFlags in
        let base = baseVFS(vfs)
        let wrapped = FileHeader.wrapped(file)
        let code = base.pointee.xOpen!(base, name, wrapped, flags, outFlags)
        for offset in [FileHeader.map, FileHeader.mapBytes, FileHeader.fileBytes, FileHeader.device, FileHeader.inode] {
            FileHeader.setInt(file, offset, 0)
        }
        FileHeader.setInt(file, FileHeader.path, Int(bitPattern: name))
        FileHeader.setInt(file, FileHeader.isMainDatabase, flags & SQLITE_OPEN_MAIN_DB != 0 && name != nil ? 1 : 0)
        // SQLite calls xClose whenever the methods are set, even after a failed open.
        file!.pointee.pMethods = wrapped.pointee.pMethods == nil ? nil : UnsafePointer(mappedMethods)
        return code
    }

/// The wrapped file's methods: every call goes to the default VFS's file, except fetching pages
/// of a main database file (and setting the map's size, which its own map must never see).
/// nonisolated(unsafe): written once, here, and only read after.
nonisolated(unsafe) private let mappedMethods: UnsafeMutablePointer<sqlite3_io_methods> = {
    let methods = UnsafeMutablePointer<sqlite3_io_methods>.allocate(capacity: 1)
    methods.initialize(to: sqlite3_io_methods())
    methods.pointee.iVersion = 3
    methods.pointee.xClose = { file in
        let wrapped = FileHeader.wrapped(file)
        let code = wrapped.pointee.pMethods.pointee.xClose!(wrapped)
        if FileHeader.int(file, FileHeader.map) != 0 { SharedMaps.release(file) }
        return code
    }
    methods.pointee.xRead = { file, buffer, count, offset in
        let wrapped = FileHeader.wrapped(file)
        return wrapped.pointee.pMethods.pointee.xRead!(wrapped, buffer, count, offset)
    }
    methods.pointee.xWrite = { file, buffer, count, offset in
        let wrapped = FileHeader.wrapped(file)
        return wrapped.pointee.pMethods.pointee.xWrite!(wrapped, buffer, count, offset)
    }
    methods.pointee.xTruncate = { file, size in
        let wrapped = FileHeader.wrapped(file)
        return wrapped.pointee.pMethods.pointee.xTruncate!(wrapped, size)
    }
    methods.pointee.xSync = { file, flags in
        let wrapped = FileHeader.wrapped(file)
        return wrapped.pointee.pMethods.pointee.xSync!(wrapped, flags)
    }
    methods.pointee.xFileSize = { file, size in
        let wrapped = FileHeader.wrapped(file)
        return wrapped.pointee.pMethods.pointee.xFileSize!(wrapped, size)
    }
    methods.pointee.xLock = { file, lock in
        let wrapped = FileHeader.wrapped(file)
        return wrapped.pointee.pMethods.pointee.xLock!(wrapped, lock)
    }
    methods.pointee.xUnlock = { file, lock in
        let wrapped = FileHeader.wrapped(file)
        return wrapped.pointee.pMethods.pointee.xUnlock!(wrapped, lock)
    }
    methods.pointee.xCheckReservedLock = { file, reserved in
        let wrapped = FileHeader.wrapped(file)
        return wrapped.pointee.pMethods.pointee.xCheckReservedLock!(wrapped, reserved)
    }
    methods.pointee.xFileControl = { file, operation, argument in
        // The pager gives its map size here (PRAGMA mmap_size, and -1 to ask): it is this map's.
        if FileHeader.int(file, FileHeader.isMainDatabase) == 1, operation == SQLITE_FCNTL_MMAP_SIZE, let argument {
            let requested = argument.assumingMemoryBound(to: Int64.self)
            if requested.pointee >= 0, FileHeader.int(file, FileHeader.map) == 0 {
                FileHeader.setInt(file, FileHeader.mapBytes, Int(requested.pointee))
            }
            requested.pointee = Int64(FileHeader.int(file, FileHeader.mapBytes))
            return SQLITE_OK
        }
        let wrapped = FileHeader.wrapped(file)
        return wrapped.pointee.pMethods.pointee.xFileControl!(wrapped, operation, argument)
    }
    methods.pointee.xSectorSize = { file in
        let wrapped = FileHeader.wrapped(file)
        return wrapped.pointee.pMethods.pointee.xSectorSize!(wrapped)
    }
    methods.pointee.xDeviceCharacteristics = { file in
        let wrapped = FileHeader.wrapped(file)
        return wrapped.pointee.pMethods.pointee.xDeviceCharacteristics!(wrapped)
    }
    methods.pointee.xShmMap = { file, region, size, extend, address in
        let wrapped = FileHeader.wrapped(file)
        guard let method = wrapped.pointee.pMethods.pointee.xShmMap else { return SQLITE_IOERR }
        return method(wrapped, region, size, extend, address)
    }
    methods.pointee.xShmLock = { file, offset, count, flags in
        let wrapped = FileHeader.wrapped(file)
        guard let method = wrapped.pointee.pMethods.pointee.xShmLock else { return SQLITE_IOERR }
        return method(wrapped, offset, count, flags)
    }
    methods.pointee.xShmBarrier = { file in
        let wrapped = FileHeader.wrapped(file)
        wrapped.pointee.pMethods.pointee.xShmBarrier?(wrapped)
    }
    methods.pointee.xShmUnmap = { file, delete in
        let wrapped = FileHeader.wrapped(file)
        guard let method = wrapped.pointee.pMethods.pointee.xShmUnmap else { return SQLITE_IOERR }
        return method(wrapped, delete)
    }
    methods.pointee.xFetch = { file, offset, count, page in
        page!.pointee = nil
        let wrapped = FileHeader.wrapped(file)
        guard FileHeader.int(file, FileHeader.isMainDatabase) == 1 else {
            guard let fetch = wrapped.pointee.pMethods.pointee.xFetch else { return SQLITE_OK }
            return fetch(wrapped, offset, count, page)
        }
        // With 256 bytes of the file after the page (see the top of the file).
        let end = Int(offset) + Int(count) + 256
        let mapBytes = FileHeader.int(file, FileHeader.mapBytes)
        guard offset >= 0, end <= mapBytes else { return SQLITE_OK }
        let sizeSeen = FileHeader.int(file, FileHeader.fileBytes)
        if end > sizeSeen {
            // The last page of the size seen: read with xRead, without asking the size again.
            guard Int(offset) + Int(count) > sizeSeen else { return SQLITE_OK }
            // Past the size last seen (forgotten after every commit: xUnfetch): look again.
            var size: Int64 = 0
            guard wrapped.pointee.pMethods.pointee.xFileSize!(wrapped, &size) == SQLITE_OK else { return SQLITE_OK }
            FileHeader.setInt(file, FileHeader.fileBytes, Int(size))
            guard end <= Int(size) else { return SQLITE_OK }
        }
        var map = UnsafeMutableRawPointer(bitPattern: FileHeader.int(file, FileHeader.map))
        if map == nil {
            guard let shared = SharedMaps.take(file, wrapped: wrapped, bytes: mapBytes) else {
                FileHeader.setInt(file, FileHeader.mapBytes, 0) // not tried again: read calls
                return SQLITE_OK
            }
            FileHeader.setInt(file, FileHeader.map, Int(bitPattern: shared.address))
            FileHeader.setInt(file, FileHeader.mapBytes, shared.bytes)
            guard end <= shared.bytes else { return SQLITE_OK }
            map = shared.address
        }
        page!.pointee = map! + Int(offset)
        return SQLITE_OK
    }
    methods.pointee.xUnfetch = { file, offset, page in
        guard FileHeader.int(file, FileHeader.isMainDatabase) == 1 else {
            let wrapped = FileHeader.wrapped(file)
            guard let unfetch = wrapped.pointee.pMethods.pointee.xUnfetch else { return SQLITE_OK }
            return unfetch(wrapped, offset, page)
        }
        // A page given out stays valid until the file is closed. SQLite's "unmap everything"
        // (no page), at the first read transaction after a commit, is what this VFS skips; the
        // size seen is forgotten then.
        if page == nil { FileHeader.setInt(file, FileHeader.fileBytes, 0) }
        return SQLITE_OK
    }
    return methods
}()
