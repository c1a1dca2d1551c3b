// A callback that is set (or replaced) once and called from any thread.
//
// Not `Locked<((Input) -> Void)?>`: a function stored directly as a generic container's value
// is kept in its most general representation, and `withLock { $0 }` hands it to the closure
// `inout`, converting it to the specific representation and back on the way out — wrapping
// it in two more thunks on every read. The slot then holds a chain that grows by two objects
// per read and is never freed, and a call goes through the whole chain: a million reads and one
// call overflow the stack (CallbackSlotTests shows the slot stays flat). A class holding the
// function has one representation and is read by reference.

public final class CallbackSlot<Input>: Sendable {
    private final class Box: Sendable {
        let call: @Sendable (Input) -> Void
        init(_ call: @escaping @Sendable (Input) -> Void) { self.call = call }
    }

    private let box = Locked<Box?>(nil)

    public init() {}

    public func set(_ call: @escaping @Sendable (Input) -> Void) {
        let new = Box(call)
        box.withLock { $0 = new }
    }

    /// The callback, or nil when none is set.
    public var current: (@Sendable (Input) -> Void)? {
        box.withLock { $0 }?.call
    }

    /// The callback, now unset: a caller done with it lets go of what it holds.
    public func take() -> (@Sendable (Input) -> Void)? {
        box.withLock { box in
            defer { box = nil }
            return box
        }?.call
    }

    /// Calls the callback, if one is set, outside the lock.
    public func callAsFunction(_ input: Input) {
        box.withLock { $0 }?.call(input)
    }
}
