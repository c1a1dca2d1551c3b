// Larder's version, and the git revision it was built from. The revision is "unknown" unless
// the build writes it here: the container build does, from its LARDER_REVISION argument
// (docker/Dockerfile); a plain `swift build` leaves it as it is.

public enum LarderVersion {
    public static let string = "0.1.0"
    public static let revision = "unknown"
}
